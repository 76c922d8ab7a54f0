"""The structured-output domain error (its own module, so the grammar builders and the request
checks both raise it without importing each other)."""
from __future__ import annotations

import re

from server.errors import APIError

__all__ = ["ConstraintError", "GRAMMAR_ERRORS", "grammar_error_message"]

#: What the grammar backends raise for input they refuse: XGrammar a RuntimeError (its
#: InvalidJSONError / InvalidStructuralTagError subclass it), llguidance a ValueError. Anything
#: else is a bug and reaches the error handler as one.
GRAMMAR_ERRORS: tuple[type[Exception], ...] = (RuntimeError, ValueError)


class ConstraintError(APIError, ValueError):
    """The request asks for a constraint that cannot be enforced; ``param`` names the field.
    A 400 as it stands (code ``invalid_constraint``, ``invalid_schema`` for a schema)."""

    def __init__(self, message: str, param: str | None = None, *, code: str = "invalid_constraint") -> None:
        super().__init__(message, code=code, param=param)


# XGrammar's log prefix on its messages ("[12:00:00] /project/cpp/x.cc:12: Check failed: (...) is false: ")
_XGR_NOISE = re.compile(r"^\[\d\d:\d\d:\d\d\] \S+:\d+: (Check failed: \(.*?\) is false: )?")


def grammar_error_message(exc: BaseException) -> str:
    """A grammar backend's refusal as a user reads it (XGrammar's log prefix cut off)."""
    text = str(exc).strip()
    return _XGR_NOISE.sub("", text).strip() or type(exc).__name__
