"""A ReAct agent over SQL, documents and the web, on gramserve's OpenAI-compatible API.

``python -m examples.agent "How many orders in March?"`` asks one question;
``python -m examples.agent.eval`` measures tool selection accuracy. See README.md beside this file.
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from .cache import TTLCache, canonical_key
from .loop import SYSTEM_PROMPT, Action, Agent, Observation, RunResult, Step
from .sql_tool import build_database, sql_tool
from .tools import Tool, ToolError, ToolUnavailable, tool_spec
from .vector_tool import VectorIndex, vector_tool
from .web_tool import web_tool

__all__ = ["DEFAULT_BASE_URL", "SYSTEM_PROMPT", "Action", "Agent", "Observation", "RunResult", "Step",
           "TTLCache", "Tool", "ToolError", "ToolUnavailable", "build_database", "canonical_key",
           "default_tools", "make_client", "sql_tool", "tool_spec", "vector_tool", "web_tool"]

DEFAULT_BASE_URL = "http://127.0.0.1:8000/v1"  # `make serve`


def default_tools(*, db_path: Path | str | None = None, index: VectorIndex | None = None) -> list[Tool]:
    """sql_query over a fresh copy of the example database, vector_search over the example
    documents, and an offline web_search."""
    if db_path is None:
        db_path = Path(tempfile.mkdtemp(prefix="agent-db-")) / "procurement.db"
    if not Path(db_path).exists():
        build_database(db_path)
    return [sql_tool(db_path), vector_tool(index), web_tool()]


def make_client(*, base_url: str = DEFAULT_BASE_URL, api_key: str | None = None, timeout: float = 600.0) -> Any:
    """An ``openai.OpenAI`` client for the server (key from the argument, else OPENAI_API_KEY,
    else a placeholder: a local server started without --api-key accepts anything)."""
    import os

    from openai import OpenAI

    return OpenAI(base_url=base_url, api_key=api_key or os.environ.get("OPENAI_API_KEY") or "none",
                  timeout=timeout, max_retries=0)
