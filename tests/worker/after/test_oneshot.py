"""One-shot triggers: spent by their first run's record, in place, atomically; anything unrecognised left alone."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pi_dispatch.infra.events import Recorder
from pi_dispatch.triggers.file import DISARMED, load_triggers
from pi_dispatch.worker.after.oneshot import OneShots, one_shot

NOW = 1_796_000_000_000
CRON = {
    "on": {"type": "cron", "id": "nightly", "pattern": "0 3 * * *"},
    "run": {"kind": "local", "folder": "/a", "command": "x"},
}
ISSUE_ONCE = {
    "on": {"type": "issue", "action": ["closed"], "number": 40, "once": True},
    "run": {"kind": "github", "flow": "deploy"},
}
PR_ONCE = {
    "on": {"type": "pull_request", "action": ["closed"], "number": 12, "once": True},
    "run": {"kind": "github", "flow": "wrap"},
}
LABEL = {"on": {"type": "label", "any": ["pi:fix"]}, "run": {"kind": "github", "flow": "fix"}}


def write(path: Path, *entries: dict[str, Any]) -> Path:
    path.write_text(json.dumps({"triggers": list(entries)}, indent=2) + "\n")
    path.chmod(0o644)
    return path


def job(index: int, kind: str = "issue", **matched: Any) -> dict[str, Any]:
    fields = {"index": index, "type": kind, "action": "closed", "once": True} | matched
    return {"kind": "github", "flow": "deploy", "trigger": {"deliveryId": "d1", "matched": fields}}


def test_the_matched_rule_is_spent_in_place_and_every_index_kept(tmp_path: Path) -> None:
    path = write(tmp_path / "triggers.json", CRON, ISSUE_ONCE, LABEL, PR_ONCE)
    events = Recorder()
    shots = OneShots(path, events)
    assert shots.spend("gh-d1", job(1, number=40), NOW)
    document = json.loads(path.read_text())
    assert document["triggers"][1]["on"]["disarmed"] == {"at": "2026-11-30T00:53:20.000Z", "jobId": "gh-d1"}
    assert [entry["on"]["type"] for entry in document["triggers"]] == ["cron", "issue", "label", "pull_request"]
    loaded = load_triggers(path)
    assert [(trigger.index, trigger.on_type) for trigger in loaded] == [
        (0, "cron"), (1, DISARMED), (2, "label"), (3, "pull_request")
    ]  # fmt: skip
    assert path.stat().st_mode & 0o777 == 0o644  # a receiver reading it as another user still can
    assert events.events == [("trigger_disarmed", {"jobId": "gh-d1", "index": 1})]
    assert shots.spend("gh-d2", job(3, "pull_request"), NOW)  # a PR close names no number
    assert "disarmed" in json.loads(path.read_text())["triggers"][3]["on"]


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (job(2), "rule-differs"),  # a label rule at that index: another file's numbering
        (job(1, number=41), "rule-differs"),
        (job(1, action="close"), "rule-differs"),
        (job(9), "no-such-index"),
    ],
)
def test_an_entry_that_is_not_the_armed_rule_is_left_alone(tmp_path: Path, data: dict[str, Any], reason: str) -> None:
    path = write(tmp_path / "triggers.json", CRON, ISSUE_ONCE, LABEL)
    before = path.read_bytes()
    events = Recorder()
    assert not OneShots(path, events).spend("gh-d1", data, NOW)
    assert path.read_bytes() == before
    index = data["trigger"]["matched"]["index"]
    assert events.events == [("trigger_disarm_skipped", {"jobId": "gh-d1", "index": index, "reason": reason})]


def test_a_spent_rule_is_not_spent_again(tmp_path: Path) -> None:
    path = write(tmp_path / "triggers.json", ISSUE_ONCE)
    shots = OneShots(path, Recorder())
    assert shots.spend("gh-d1", job(0, number=40), NOW)
    after = path.read_bytes()
    assert not shots.spend("gh-d2", job(0, number=40), NOW + 1)
    assert path.read_bytes() == after
    assert json.loads(after)["triggers"][0]["on"]["disarmed"]["jobId"] == "gh-d1"


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"trigger": "x"},
        {"trigger": {"matched": {"index": 0, "once": "true"}}},
        {"trigger": {"matched": {"index": "0", "once": True}}},
        {"trigger": {"matched": {"index": 0}}},
    ],
)
def test_only_a_job_that_says_once_literally_spends_anything(data: dict[str, Any]) -> None:
    assert one_shot(data) is None


@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[str]:
    """The folder made unwritable to this process; yields the errno name a write then fails with. As root (CI) a
    folder's mode stops nothing, so it is bind-mounted read-only over itself instead."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            yield "EACCES"
        finally:
            folder.chmod(0o755)
        return
    if shutil.which("mount") is None:
        pytest.fail("a read-only bind mount needs mount(8) (`./dev test` runs as root on Debian)")
    subprocess.run(["mount", "--bind", str(folder), str(folder)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(folder)], check=True)
        yield "EROFS"
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_no_file_or_a_read_only_folder_is_logged_never_raised(tmp_path: Path) -> None:
    events = Recorder()
    assert not OneShots(tmp_path / "missing.json", events).spend("gh-d1", job(0), NOW)
    assert events.events == [("trigger_disarm_failed", {"jobId": "gh-d1", "index": 0, "reason": "ENOENT"})]
    folder = tmp_path / "ro"
    folder.mkdir()
    path = write(folder / "triggers.json", ISSUE_ONCE)
    before = path.read_bytes()
    with read_only(folder) as reason:
        assert not OneShots(path, events).spend("gh-d1", job(0, number=40), NOW)
    assert events.events[-1] == ("trigger_disarm_failed", {"jobId": "gh-d1", "index": 0, "reason": reason})
    assert path.read_bytes() == before  # nothing half-written


def test_without_a_triggers_file_setting_it_falls_back_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "triggers.json", ISSUE_ONCE)
    assert OneShots(None, Recorder()).spend("gh-d1", job(0, number=40), NOW)
    assert "disarmed" in json.loads((tmp_path / "triggers.json").read_text())["triggers"][0]["on"]


def test_a_file_that_is_not_json_is_left_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "triggers.json"
    path.write_text("{not json")
    events = Recorder()
    assert not OneShots(path, events).spend("gh-d1", job(0), NOW)
    assert path.read_text() == "{not json"
    assert events.events[0][0] == "trigger_disarm_failed"
