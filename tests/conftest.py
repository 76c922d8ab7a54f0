"""Session fixtures shared by the e2e and reliability suites: one real server for both.

The server starts only when a test asks for it (unit tests never do).
"""
from __future__ import annotations

import os
from types import SimpleNamespace

import httpx
import pytest

from tests.server_process import API_KEY, CLIENT_TIMEOUT_S, serving


@pytest.fixture(scope="session")
def server():
    # GRAMSERVE_TEST_SERVER=http://host:port runs e2e modules against a server already running
    # (for quick iteration on one module; tests that read the process's memory need their own)
    external = os.environ.get("GRAMSERVE_TEST_SERVER")
    if external:
        yield SimpleNamespace(base=external.rstrip("/"), proc=None)
        return
    with serving([], log_name="main") as srv:
        yield srv


@pytest.fixture(scope="session")
def client(server):
    from openai import OpenAI

    return OpenAI(base_url=server.base + "/v1", api_key=API_KEY, max_retries=0, timeout=CLIENT_TIMEOUT_S)


@pytest.fixture(scope="session")
def model(client) -> str:
    return client.models.list().data[0].id


@pytest.fixture(scope="session")
def http(server):
    with httpx.Client(base_url=server.base, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=CLIENT_TIMEOUT_S) as c:
        yield c


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under ``make test`` (GRAMSERVE_STRICT_SKIPS=1) a skip is a failure: every component the
    suite needs is installed by the set-up, so a skip there means one is missing, not a pass."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and not hasattr(report, "wasxfail") and os.environ.get("GRAMSERVE_STRICT_SKIPS") == "1":
        reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = (f"skipped under make test, where nothing may be missing: {reason} "
                           "(run `make install` again, or see the README's test section)")


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """The same for a whole module skipped at import (``pytest.importorskip`` at its top)."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("GRAMSERVE_STRICT_SKIPS") == "1":
        report.outcome = "failed"
        report.longrepr = (f"{collector.nodeid} skipped under make test, where nothing may be missing: "
                           f"{report.longrepr} (run `make install` again)")
