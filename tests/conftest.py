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
