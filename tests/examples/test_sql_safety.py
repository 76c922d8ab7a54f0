"""sql_query under hostile queries: every rule has a query that tries to break it, and the
database (file bytes and every table) is unchanged afterwards (the agent_db fixture checks)."""
from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from examples.agent.sql_tool import ALLOWED_TABLES, SqlTool, sql_tool
from examples.agent.tools import ToolError


@pytest.fixture
def tool(agent_db: Path) -> SqlTool:
    return SqlTool(agent_db, timeout_s=1.0, max_rows=50)


def refused(tool: SqlTool, query: str, params=None) -> str:
    with pytest.raises(ToolError) as info:
        tool(query, params)
    assert not info.value.retryable, "a refusal must not be retried"
    return str(info.value)


# -- SELECT only, enforced by the authorizer --------------------------------------------------

def test_drop_table_refused(tool):
    assert "refused" in refused(tool, "DROP TABLE orders")


@pytest.mark.parametrize("query", [
    "INSERT INTO orders (id, contract_id, provider_id, order_date, quantity, unit_price, total, region, status) "
    "VALUES (9999, 1, 1, '2024-01-01', 1, 1, 1, 'EU', 'pending')",
    "INSERT INTO regions SELECT 'XX', 'Nowhere'",
    "REPLACE INTO regions VALUES ('EU', 'Hacked')",
])
def test_insert_refused(tool, query):
    assert "INSERT is not allowed" in refused(tool, query)


@pytest.mark.parametrize("query", ["UPDATE orders SET total = 0", "DELETE FROM orders",
                                   "/* SELECT */ DELETE FROM orders WHERE 1", "ALTER TABLE orders ADD COLUMN x",
                                   "CREATE TABLE evil (x)", "CREATE TEMP TABLE evil (x)", "BEGIN", "VACUUM"])
def test_other_writes_refused(tool, query):
    assert "refused" in refused(tool, query)


def test_attach_refused(tool, tmp_path):
    target = tmp_path / "evil.db"
    assert "ATTACH is not allowed" in refused(tool, f"ATTACH DATABASE '{target}' AS evil")
    assert not target.exists()


@pytest.mark.parametrize("query", ["PRAGMA writable_schema = ON", "PRAGMA table_info(orders)",
                                   "PRAGMA query_only = OFF", "SELECT * FROM pragma_table_info('orders')"])
def test_pragma_refused(tool, query):
    assert "refused" in refused(tool, query)


def test_second_statement_refused(tool):
    assert "one statement" in refused(tool, "SELECT count(*) FROM orders; DROP TABLE orders")
    assert "one statement" in refused(tool, "SELECT 1; INSERT INTO regions VALUES ('XX', 'y')")


@pytest.mark.parametrize("query", [
    "SELECT * FROM staff_salaries",
    "SELECT count(*) FROM staff_salaries",
    "SELECT (SELECT max(salary) FROM staff_salaries)",
    "WITH s AS (SELECT * FROM staff_salaries) SELECT * FROM s",
    "SELECT o.id FROM orders o JOIN staff_salaries s ON 1 LIMIT 1",
    "SELECT name, sql FROM sqlite_master",
    "SELECT count(*) FROM sqlite_schema",
])
def test_table_off_the_list_refused(tool, query):
    message = refused(tool, query)
    assert "not on the allowlist" in message or "schema" in message
    assert "staff_salaries" not in ALLOWED_TABLES


def test_function_off_the_list_refused(tool):
    assert "not allowed" in refused(tool, "SELECT randomblob(100000000)")
    assert "not allowed" in refused(tool, "SELECT load_extension('evil')")


def test_endless_recursive_cte_stopped_by_the_time_limit(tool):
    t0 = time.monotonic()
    message = refused(tool, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c")
    assert "time limit" in message
    assert time.monotonic() - t0 < 5, "the progress handler should interrupt soon after the 1 s limit"


def test_endless_cte_rows_stop_at_the_row_cap(tool):
    out = tool("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c")
    assert out["row_count"] == 50 and out["truncated"] is True


@pytest.mark.parametrize("value", ["x'; DROP TABLE orders; --", "' OR '1'='1", "returned' UNION SELECT name, salary FROM staff_salaries --"])
def test_injection_through_a_parameter_value_is_data(tool, value):
    out = tool("SELECT id, status FROM orders WHERE status = ?", [value])
    assert out["rows"] == []  # bound as one string value, never parsed as SQL


# -- what the rules must still allow ---------------------------------------------------------

def test_words_inside_literals_are_not_matched(tool):
    """Enforcement is SQLite's, not string matching: a SELECT that mentions DROP still runs."""
    out = tool("SELECT 'DROP TABLE orders; ATTACH x' AS text")
    assert out["rows"] == [["DROP TABLE orders; ATTACH x"]]


def test_placeholders_bind_from_params(tool, agent_db):
    conn = sqlite3.connect(agent_db)
    expected = conn.execute("SELECT count(*) FROM orders WHERE order_date LIKE '2024-03-%'").fetchone()[0]
    conn.close()
    q = "SELECT count(*) FROM orders WHERE strftime('%m', order_date) = {}"
    assert tool(q.format("?"), ["03"])["rows"] == [[expected]]
    assert tool(q.format("$1"), ["03"])["rows"] == [[expected]]
    assert tool("SELECT $2, $1", ["a", "b"])["rows"] == [["b", "a"]]  # by number, not by order


def test_parameter_count_mismatch_is_an_error(tool):
    assert "parameter mismatch" in refused(tool, "SELECT * FROM orders WHERE status = ?", [])


def test_ctes_and_joins_over_allowed_tables_run(tool):
    out = tool("WITH q3 AS (SELECT * FROM contracts WHERE quarter = 3) "
               "SELECT p.name, sum(q3.amount) FROM q3 JOIN providers p ON p.id = q3.provider_id GROUP BY p.name")
    assert out["row_count"] > 0 and out["columns"] == ["name", "sum(q3.amount)"]


def test_row_cap(tool):
    out = tool("SELECT * FROM orders")
    assert out["row_count"] == 50 and out["truncated"] is True


def test_connection_is_read_only_without_the_authorizer(tool):
    """Least privilege below the authorizer: the connection itself cannot write."""
    from examples.agent.sql_tool import _Refusal

    conn = tool._connect(_Refusal())
    conn.set_authorizer(None)
    with pytest.raises(sqlite3.OperationalError, match="readonly|read-only|query_only"):
        conn.execute("DELETE FROM orders")
    conn.close()


def test_description_lists_only_allowed_tables(agent_db):
    t = sql_tool(agent_db)
    for table in ALLOWED_TABLES:
        assert f"\n{table}(" in t.description
    assert "staff_salaries" not in t.description
    assert "NOT for" in t.description
