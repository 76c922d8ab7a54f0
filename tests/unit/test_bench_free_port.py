"""bench/_proc.py ``free_port``: a port for a server started next (test servers, ``bench.dtype``'s) is free
and outside the range the machine hands out for its own sockets (a port from there was once taken
while the server started)."""
from __future__ import annotations

import socket

from bench._proc import ephemeral_low, free_port


def test_free_port_is_free_and_below_the_ephemeral_range() -> None:
    low = ephemeral_low()
    ports = {free_port() for _ in range(20)}
    assert len(ports) > 1  # (random, not one fixed port)
    for port in ports:
        if low > 21000:
            assert 20000 <= port < low
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # free: it binds


def test_the_ephemeral_range_is_read_from_proc(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "sys/net/ipv4").mkdir(parents=True)
    (tmp_path / "sys/net/ipv4/ip_local_port_range").write_text("40000\t60999\n")
    assert ephemeral_low(tmp_path) == 40000
    assert ephemeral_low(tmp_path / "missing") == 32768  # Linux's default
