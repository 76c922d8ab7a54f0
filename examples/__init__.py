"""Runnable examples built on gramserve's public OpenAI-compatible API."""
