"""The processes' log lines: one JSON object each, through the standard logging (libraries' warnings too), with a
timestamp, a level from the event and the event's fields; under journald, each line carries its priority."""

from __future__ import annotations

import io
import json
import logging
import warnings
from datetime import datetime, timedelta

import pytest

from pi_dispatch.infra.events import json_lines


@pytest.fixture(autouse=True)
def _restore_logging() -> object:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    yield
    root.handlers[:], _ = saved[0], root.setLevel(saved[1])
    logging.captureWarnings(False)


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_an_event_is_one_json_line_with_timestamp_level_and_its_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JOURNAL_STREAM", raising=False)
    stream = io.StringIO()
    log = json_lines("mini1", stream)
    log("job_put_back", {"jobId": "gh-1", "host": "forged", "level": "forged"})
    log("run_mirror_failed", {"jobId": "gh-1"})
    log("worker_failing", {"reason": "store gone"})
    first, second, third = lines(stream)
    assert list(first)[:3] == ["timestamp", "level", "event"]
    assert datetime.fromisoformat(str(first["timestamp"])).utcoffset() == timedelta(0)
    assert (first["level"], first["event"], first["jobId"], first["host"]) == ("INFO", "job_put_back", "gh-1", "mini1")
    assert (second["level"], third["level"]) == ("WARNING", "ERROR")


def test_library_warnings_come_out_the_same_way_and_library_chatter_does_not(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JOURNAL_STREAM", raising=False)
    stream = io.StringIO()
    json_lines("mini1", stream)
    logging.getLogger("aiohttp.access").info("127.0.0.1 GET / 200")  # chatter: below the libraries' level
    logging.getLogger("redis.asyncio").warning("connection reset")
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("a deprecated call", DeprecationWarning, stacklevel=1)
    said = lines(stream)
    assert [line["level"] for line in said] == ["WARNING", "WARNING"]
    assert said[0]["event"] == "connection reset" and "a deprecated call" in str(said[1]["event"])


def test_under_journald_each_line_carries_its_priority(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOURNAL_STREAM", "8:12345")
    out, err = io.StringIO(), io.StringIO()
    log = json_lines(None, out, err)
    log("receiver_started", {"port": 3000})
    log("delivery_refused", {"status": 401})
    assert out.getvalue().startswith("<6>{") and json.loads(out.getvalue()[3:])["event"] == "receiver_started"
    assert err.getvalue().startswith("<4>{") and json.loads(err.getvalue()[3:])["status"] == 401
