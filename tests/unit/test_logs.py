"""server/logs.py: the JSON line keeps its fields and order, and its timestamp (cached per second)
follows each record's own time."""
from __future__ import annotations

import json
import logging
import sys

from server.logs import JsonFormatter


def _record(created: float, **extra: object) -> logging.LogRecord:
    rec = logging.getLogger("gramserve.access").makeRecord("gramserve.access", logging.INFO, "", 0, "request", (),
                                                           None, extra=extra)
    rec.created, rec.msecs = created, (created - int(created)) * 1000
    return rec


def test_fields_in_order_with_the_extras_after() -> None:
    line = JsonFormatter().format(_record(0.25, request_id="r1", status=200, note="é"))
    assert line == ('{"ts": "1970-01-01T00:00:00.250Z", "level": "info", "logger": "gramserve.access", '
                    '"msg": "request", "request_id": "r1", "status": 200, "note": "é"}')


def test_the_timestamp_follows_each_record_across_seconds() -> None:
    f = JsonFormatter()
    stamps = [json.loads(f.format(_record(t)))["ts"] for t in (59.5, 60.125, 59.75, 3661.0)]
    assert stamps == ["1970-01-01T00:00:59.500Z", "1970-01-01T00:01:00.125Z", "1970-01-01T00:00:59.750Z",
                      "1970-01-01T01:01:01.000Z"]


def test_exceptions_and_odd_values_still_format() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        rec = logging.getLogger("gramserve").makeRecord("gramserve", logging.ERROR, "", 0, "failed %s", ("x",),
                                                       sys.exc_info(), extra={"obj": object()})
    out = json.loads(JsonFormatter().format(rec))
    assert out["msg"] == "failed x" and "ValueError: boom" in out["exc"] and out["obj"].startswith("<object")
