"""Every family's parse as OpenAI messages: streaming (``message_stream``: two parses of the text so far
become one delta), the finished message and its finish reason (``openai_message``), the shared delta
builder (``deltas``) and offline replay (``replay``, ``gramserve parse``). No call format lives here:
those are ``tool_parsers/``, thinking is ``reasoning_parsers/``."""
