"""The e2e suite's helpers live in tests/server_process.py, its fixtures in tests/conftest.py."""
from tests.server_process import API_KEY, CLIENT_TIMEOUT_S, ROOT, TESTDATA, ServerProcess, free_port, serving

__all__ = ["API_KEY", "CLIENT_TIMEOUT_S", "ROOT", "TESTDATA", "ServerProcess", "free_port", "serving"]
