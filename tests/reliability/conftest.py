"""The reliability suite runs against the real server (fixtures in tests/conftest.py)."""
