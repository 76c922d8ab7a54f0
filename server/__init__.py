"""gramserve: an OpenAI-compatible server on vLLM whose structured output always fits."""
__all__ = ["__version__"]
__version__ = "0.1.0"
