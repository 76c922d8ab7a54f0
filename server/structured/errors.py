"""The structured-output domain error (its own module, so the grammar builders and the request
checks both raise it without importing each other)."""
from __future__ import annotations

from server.errors import APIError

__all__ = ["ConstraintError", "GRAMMAR_ERRORS"]

#: What the grammar backends raise for input they refuse: XGrammar a RuntimeError (its
#: InvalidJSONError / InvalidStructuralTagError subclass it), llguidance a ValueError. Anything
#: else is a bug and reaches the error handler as one.
GRAMMAR_ERRORS: tuple[type[Exception], ...] = (RuntimeError, ValueError)


class ConstraintError(APIError, ValueError):
    """The request asks for a constraint that cannot be enforced; ``param`` names the field.
    A 400 as it stands (code ``invalid_constraint``, ``invalid_schema`` for a schema)."""

    def __init__(self, message: str, param: str | None = None, *, code: str = "invalid_constraint") -> None:
        super().__init__(message, code=code, param=param)
