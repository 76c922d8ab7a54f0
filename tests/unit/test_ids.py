"""server/ids.py: ids keep uuid4().hex's shape and stay unique within a process, across a fork and
across processes."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from server import ids

_HEX32 = re.compile(r"[0-9a-f]{32}")


@pytest.mark.parametrize("make", [ids.new_id, ids.secret_id])
def test_32_lowercase_hex_like_uuid4_hex(make) -> None:
    made = [make() for _ in range(1000)]
    assert all(_HEX32.fullmatch(i) for i in made)
    assert len(set(made)) == len(made)


def test_a_forked_child_counts_under_a_prefix_of_its_own() -> None:
    before = ids.new_id()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its ids go back through the pipe
        try:
            os.write(write, " ".join(ids.new_id() for _ in range(3)).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        child = f.read().split()
    os.waitpid(pid, 0)
    parent = [ids.new_id() for _ in range(3)]
    assert len(child) == 3 and not set(child) & set(parent)
    assert child[0][:16] != before[:16]  # a new prefix, not the parent's counter carried on
    assert {p[:16] for p in parent} == {before[:16]}


def test_two_processes_never_share_a_prefix() -> None:
    code = "from server.ids import new_id; print(new_id())"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    made = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env=env).stdout.strip() for _ in range(2)]
    assert all(_HEX32.fullmatch(i) for i in made) and made[0][:16] != made[1][:16] != ids.new_id()[:16]


def test_secret_ids_are_not_a_counter() -> None:
    """Stored responses are read back by id alone: their ids must not be guessable from one's own."""
    a, b = ids.secret_id(), ids.secret_id()
    assert a[:16] != b[:16] and int(b, 16) - int(a, 16) != 1
