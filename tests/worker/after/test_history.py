"""Record files on disk: atomic writes, newest-first reads, the retention reaper."""

from __future__ import annotations

import json
import os
from pathlib import Path

from pi_dispatch.infra.events import Recorder
from pi_dispatch.worker.after.history import read_records, reap_logs, record_path, write_record

DAY_MS = 86_400_000


def test_write_is_atomic_and_named_by_sanitized_id(tmp_path: Path) -> None:
    record = {"jobId": "repeat:nightly:1700000000000", "outcome": "completed"}
    path = write_record(tmp_path / "logs", record)
    # an id the sanitizer changes is named by its sanitized form and a hash of the exact id (names.record_stem)
    assert path is not None and path.name.startswith("repeat_nightly_1700000000000~") and path.suffix == ".json"
    assert write_record(tmp_path / "logs", {"jobId": "gh-plain-1"}) == tmp_path / "logs" / "gh-plain-1.json"
    assert path.read_text() == json.dumps(record, separators=(",", ":")) + "\n"
    stems = ["gh-plain-1", path.stem]
    names = sorted(p.name for p in (tmp_path / "logs").iterdir())
    assert names == sorted([f"{stem}{suffix}" for stem in stems for suffix in (".json", ".jsonl")])  # no temp file
    assert path.with_suffix(".jsonl").read_text() == path.read_text()  # each attempt's record, one line each


def test_a_retry_overwrites(tmp_path: Path) -> None:
    write_record(tmp_path, {"jobId": "j", "outcome": "failed"})
    write_record(tmp_path, {"jobId": "j", "outcome": "completed"})
    assert json.loads(record_path(tmp_path, "j").read_text())["outcome"] == "completed"


def test_write_failure_is_logged_not_raised(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    log = Recorder()
    assert write_record(blocker / "logs", {"jobId": "j"}, log) is None
    assert log.names() == ["run_record_failed"]


def test_read_records_newest_first_and_skips_junk(tmp_path: Path) -> None:
    for index, job_id in enumerate(["a", "b", "c"]):
        path = write_record(tmp_path, {"jobId": job_id})
        assert path is not None
        os.utime(path, ns=(index * 10**9, index * 10**9))
    (tmp_path / "junk.json").write_text("{not json")
    (tmp_path / "x.log").write_text("raw")
    assert [r["jobId"] for r in read_records(tmp_path)] == ["c", "b", "a"]
    assert read_records(tmp_path / "missing") == []


def test_reaper_deletes_old_json_and_log_only(tmp_path: Path) -> None:
    now_ms = 100 * DAY_MS
    old_seconds = (now_ms - 31 * DAY_MS) / 1000
    for name in ("old.json", "old.log", "old.txt"):
        (tmp_path / name).write_text("x")
        os.utime(tmp_path / name, (old_seconds, old_seconds))
    (tmp_path / "new.json").write_text("x")
    os.utime(tmp_path / "new.json", (now_ms / 1000, now_ms / 1000))
    (tmp_path / "dir.json").mkdir()
    log = Recorder()
    assert reap_logs(tmp_path, 30, now=lambda: now_ms, log=log) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir.json", "new.json", "old.txt"]
    assert log.names() == ["reaped_log", "reaped_log"]


def test_reaper_keeps_forever_at_zero(tmp_path: Path) -> None:
    (tmp_path / "old.json").write_text("x")
    os.utime(tmp_path / "old.json", (0, 0))
    assert reap_logs(tmp_path, 0) == 0
    assert (tmp_path / "old.json").exists()
