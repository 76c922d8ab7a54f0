"""``sql_query``: read-only SQL over the example's SQLite database, safe against hostile queries.

The rules are enforced by SQLite itself, never by looking at the query text:

* least privilege: the connection is opened read-only (``file:...?mode=ro``) with ``query_only``;
* SELECT only, and only the allowlisted tables and functions: an authorizer callback
  (``set_authorizer``) refuses every other action SQLite is about to take (writes, DDL, ATTACH,
  PRAGMA, transactions) at compile time, so a refused statement never runs;
* one statement per call (``execute`` refuses a second one before it is compiled);
* values only through parameters (``?``, ``?N`` or ``$N`` placeholders bound from ``params``);
* a per-query time limit (a progress handler interrupts the VM) and a row cap.
"""
from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Sequence

from .tools import Tool, ToolError

__all__ = ["ALLOWED_TABLES", "SEED_SQL", "SqlTool", "build_database", "database_snapshot", "sql_tool"]

SEED_SQL = Path(__file__).resolve().parent / "data" / "seed.sql"
ALLOWED_TABLES = ("regions", "providers", "contracts", "orders")
# Plain scalar and aggregate functions. Anything else (randomblob, zeroblob, load_extension, ...)
# is refused by the authorizer like a table off the list.
ALLOWED_FUNCTIONS = frozenset("""
count sum avg min max total group_concat abs round lower upper length substr substring trim ltrim
rtrim replace instr coalesce ifnull nullif iif strftime date time datetime julianday unixepoch
printf format like glob typeof cast
""".split())
_DENIED_ACTIONS = {
    getattr(sqlite3, n): n.removeprefix("SQLITE_").replace("_", " ")
    for n in dir(sqlite3)
    if n.startswith(("SQLITE_CREATE_", "SQLITE_DROP_"))
    or n in {"SQLITE_INSERT", "SQLITE_UPDATE", "SQLITE_DELETE", "SQLITE_ATTACH", "SQLITE_DETACH",
             "SQLITE_PRAGMA", "SQLITE_TRANSACTION", "SQLITE_SAVEPOINT", "SQLITE_ALTER_TABLE",
             "SQLITE_REINDEX", "SQLITE_ANALYZE"}
}


def build_database(path: Path | str, *, seed: Path = SEED_SQL) -> Path:
    """Create the example database at ``path`` from the seed SQL (replacing any file there)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    conn = sqlite3.connect(path)
    try:
        conn.executescript("BEGIN;\n" + seed.read_text() + "\nCOMMIT;")  # one transaction: one sync
        conn.commit()
    finally:
        conn.close()
    return path


def database_snapshot(path: Path | str) -> tuple[bytes, dict[str, list[tuple]]]:
    """The file's bytes and every table's rows (sqlite_master included): equal before and after
    means nothing was written."""
    data = Path(path).read_bytes()
    conn = sqlite3.connect(f"file:{Path(path)}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        rows = {t: conn.execute(f'SELECT * FROM "{t}" ORDER BY rowid').fetchall() for t in tables}
        rows["sqlite_master"] = conn.execute("SELECT * FROM sqlite_master ORDER BY name").fetchall()
    finally:
        conn.close()
    return data, rows


class _Refusal(threading.local):
    reason: str | None = None


class SqlTool:
    """Runs one SELECT per call under the rules in the module docstring."""

    def __init__(self, db_path: Path | str, *, allowed_tables: Sequence[str] = ALLOWED_TABLES,
                 timeout_s: float = 2.0, max_rows: int = 50, progress_every: int = 1000) -> None:
        self.db_path = Path(db_path)
        if not self.db_path.is_file():
            raise FileNotFoundError(f"no database at {self.db_path}; create it with build_database()")
        self.allowed_tables = tuple(allowed_tables)
        self.timeout_s = timeout_s
        self.max_rows = max_rows
        self.progress_every = progress_every
        # Names that are real tables: a read of one off the list is refused. Other names an
        # authorizer READ can carry are the query's own CTEs.
        conn = sqlite3.connect(f"file:{self.db_path}?mode=ro", uri=True)
        try:
            self._real_tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        finally:
            conn.close()

    # -- connection ---------------------------------------------------------------------------
    def _connect(self, refusal: _Refusal) -> sqlite3.Connection:
        conn = sqlite3.connect(f"file:{self.db_path}?mode=ro", uri=True, check_same_thread=False)
        conn.execute("PRAGMA query_only = ON")  # before the authorizer: our own setup, not the model's
        conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 1_000_000)
        conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, 10_000)
        allowed = set(self.allowed_tables)

        def authorize(action: int, arg1: str | None, arg2: str | None, db: str | None, _src: str | None) -> int:
            if action in (sqlite3.SQLITE_SELECT, sqlite3.SQLITE_RECURSIVE):
                return sqlite3.SQLITE_OK
            if action == sqlite3.SQLITE_READ:
                if arg1 in allowed and db in ("main", None):
                    return sqlite3.SQLITE_OK
                if db is None and arg1 and arg1 not in self._real_tables and not arg1.lower().startswith("sqlite_"):
                    return sqlite3.SQLITE_OK  # a CTE of this query (its own reads are checked too)
                return deny(f"table {arg1!r} is not on the allowlist; readable tables: "
                            f"{', '.join(self.allowed_tables)}")
            if action == sqlite3.SQLITE_FUNCTION:
                if (arg2 or "").lower() in ALLOWED_FUNCTIONS:
                    return sqlite3.SQLITE_OK
                return deny(f"function {arg2!r} is not allowed")
            if arg1 and arg1.lower().startswith("sqlite_"):
                # DDL and pragma functions first touch the schema table (DELETE on sqlite_master
                # for DROP TABLE); SQLite stops at the first refusal.
                return deny("changing or inspecting the schema is not allowed: this tool runs "
                            "read-only SELECT statements only")
            what = _DENIED_ACTIONS.get(action, f"action {action}")
            return deny(f"{what} is not allowed: this tool runs read-only SELECT statements only")

        def deny(reason: str) -> int:
            refusal.reason = reason  # SQLite stops compiling at the first refusal
            return sqlite3.SQLITE_DENY

        conn.set_authorizer(authorize)
        return conn

    # -- the tool -----------------------------------------------------------------------------
    def __call__(self, query: str, params: Sequence[Any] | None = None) -> dict[str, Any]:
        if not isinstance(query, str) or not query.strip():
            raise ToolError("query must be a non-empty SELECT statement")
        values = _bindable(params)
        refusal = _Refusal()
        conn = self._connect(refusal)
        deadline = time.monotonic() + self.timeout_s
        conn.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, self.progress_every)
        try:
            cursor = _execute(conn, query, values)
            columns = [d[0] for d in cursor.description or ()]
            rows = cursor.fetchmany(self.max_rows + 1)
        except sqlite3.DatabaseError as exc:
            raise self._explain(exc, refusal) from None
        except sqlite3.ProgrammingError as exc:
            raise self._explain(exc, refusal) from None
        finally:
            conn.close()
        truncated = len(rows) > self.max_rows
        rows = rows[: self.max_rows]
        return {"columns": columns, "rows": [list(r) for r in rows], "row_count": len(rows),
                "truncated": truncated}

    def _explain(self, exc: Exception, refusal: _Refusal) -> ToolError:
        text = str(exc)
        if refusal.reason and any(w in text for w in ("not authorized", "authorization denied", "prohibited")):
            return ToolError(f"refused: {refusal.reason}")
        if "interrupted" in text:
            return ToolError(f"query exceeded the {self.timeout_s:g} s time limit; narrow it with WHERE "
                             "or LIMIT", retryable=False)
        if "one statement at a time" in text:
            return ToolError("refused: one statement per call (no ';' followed by another statement)")
        if "bindings" in text or "binding parameter" in text:
            return ToolError(f"parameter mismatch: {text}. Put one value in params per placeholder")
        if "locked" in text or "busy" in text:
            return ToolError(f"database busy: {text}", retryable=True)
        return ToolError(f"SQL error: {text}")

    def schema_text(self) -> str:
        """'table(col TYPE, ...)' lines for the allowlisted tables, for the tool description."""
        conn = sqlite3.connect(f"file:{self.db_path}?mode=ro", uri=True)
        try:
            lines = []
            for table in self.allowed_tables:
                cols = conn.execute(f'PRAGMA table_info("{table}")').fetchall()
                lines.append(f"{table}(" + ", ".join(f"{c[1]} {c[2]}".strip() for c in cols) + ")")
        finally:
            conn.close()
        return "\n".join(lines)


def _bindable(params: Sequence[Any] | None) -> list[Any]:
    if params is None:
        return []
    if isinstance(params, (str, bytes)) or not isinstance(params, Sequence):
        raise ToolError("params must be a JSON array of values, one per placeholder")
    out = []
    for v in params:
        if isinstance(v, bool):
            v = int(v)
        if v is not None and not isinstance(v, (int, float, str)):
            raise ToolError(f"params may hold strings, numbers or null only, not {type(v).__name__}")
        out.append(v)
    return out


def _execute(conn: sqlite3.Connection, query: str, values: list[Any]) -> sqlite3.Cursor:
    """Bind by name first (``$1``/``?1`` get their own number, whatever their order), by position
    when the placeholders are plain ``?``."""
    by_name = {str(i + 1): v for i, v in enumerate(values)}
    try:
        return conn.execute(query, by_name)
    except sqlite3.ProgrammingError as exc:
        if "has no name" not in str(exc):
            raise
    return conn.execute(query, values)


def sql_tool(db_path: Path | str, **options: Any) -> Tool:
    """The ``sql_query`` tool over ``db_path`` (see SqlTool for the options)."""
    impl = SqlTool(db_path, **options)
    description = (
        "Run ONE read-only SQLite SELECT over the company's procurement database and get rows back. "
        "Use it for numbers, counts, sums, averages, rankings, lists and lookups of orders, contracts, "
        "providers and regions (e.g. 'How many orders were delivered in May?', 'Total contract amount "
        "per region', 'Which providers are in Japan?'). Dates are 'YYYY-MM-DD' text; orders are from "
        "2024; amounts and totals are in USD; quarter is 1-4. Put every literal value in params and "
        "use ? placeholders, e.g. query \"SELECT name FROM providers WHERE country = ?\", params "
        f"[\"Japan\"]. At most {impl.max_rows} rows are returned.\n"
        "NOT for: what a policy, clause or procedure says (use vector_search); news, market prices or "
        "anything outside the company (use web_search); changing data (INSERT, UPDATE, DELETE, DROP "
        "are refused).\nTables:\n" + impl.schema_text()
    )
    parameters = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "maxLength": 1000,
                      "description": "one SQLite SELECT statement with ? placeholders"},
            "params": {"type": "array", "items": {"type": ["string", "number", "null"]}, "maxItems": 8,
                       "description": "values for the placeholders, in order"},
        },
        "required": ["query"],
        "additionalProperties": False,
    }
    return Tool(name="sql_query", description=description, parameters=parameters, run=impl)
