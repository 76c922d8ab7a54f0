"""tests/server_process.py: a test server's port is free and outside the range the machine hands out
for its own sockets (a port from there was once taken while the server started)."""
from __future__ import annotations

import socket

from tests.server_process import _ephemeral_low, free_port


def test_free_port_is_free_and_below_the_ephemeral_range() -> None:
    low = _ephemeral_low()
    ports = {free_port() for _ in range(20)}
    assert len(ports) > 1  # (random, not one fixed port)
    for port in ports:
        if low > 21000:
            assert 20000 <= port < low
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # free: it binds
