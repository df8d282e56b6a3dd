"""The failure hook (`PI_ON_FAILURE`) as the reference runs it (upstream-jobrun.md §7.5, §9.12), with real processes."""

from __future__ import annotations

import asyncio
from pathlib import Path

from pi_dispatch.infra.events import Recorder
from pi_dispatch.testing.jobs import write_script
from pi_dispatch.worker.after.aftermath import Aftermath, FailureHook, hook_argv


def test_the_hook_argv() -> None:
    assert hook_argv("/h", "gh-1", "failed", "container-never-started", "mini") == [
        "/h",
        "gh-1",
        "failed",
        "container-never-started",
        "mini",
    ]
    assert hook_argv("/h", "gh-1", "failed", "provider-auth-refused", "")[3:] == ["provider-auth-refused", ""]
    for reason in ("infra failure, container exit 1", "Not-A-Token", "x" * 41):
        assert hook_argv("/h", "gh-1", "failed", reason, "mini")[3] == "infra"  # type: ignore[index]
    assert hook_argv("/h", "-rf", "failed", "infra", "mini") is None
    assert hook_argv("/h", "gh-1", "", "infra", "mini") is None
    assert hook_argv("/h", "", "failed", "infra", "mini") is None


def fields(events: Recorder) -> list[dict[str, object]]:
    return [logged for name, logged in events.events if name == "on_failure"]


def hook(tmp_path: Path, body: str, timeout_s: float = 5.0) -> tuple[FailureHook, Recorder]:
    events = Recorder()
    script = write_script(tmp_path / "on-failure", f"#!/bin/sh\n{body}\n")
    return FailureHook(Path(script), timeout_s, "mini", events), events


async def test_the_hook_runs_with_its_argv_and_nothing_else(tmp_path: Path) -> None:
    said = tmp_path / "said"
    fired, events = hook(tmp_path, f'printf "%s|" "$@" > {said}; [ -t 0 ] && echo tty >> {said}; exit 3')
    await fired.fire("gh-1", "failed", "container-never-started")
    assert said.read_text() == "gh-1|failed|container-never-started|mini|"
    assert fields(events) == [{"jobId": "gh-1", "code": 3, "detail": "exit"}]


async def test_the_hook_past_its_time_is_stopped(tmp_path: Path) -> None:
    fired, events = hook(tmp_path, "trap '' TERM; sleep 30", timeout_s=0.2)
    await fired.fire("gh-1", "failed", "infra")
    assert fields(events)[0]["detail"] == "timeout"


async def test_a_missing_or_unusable_hook_spawns_nothing(tmp_path: Path) -> None:
    events = Recorder()
    await FailureHook(tmp_path / "absent", 1.0, "mini", events).fire("gh-1", "failed", "infra")
    fired, more = hook(tmp_path, "exit 0")
    await fired.fire("-rf", "failed", "infra")
    assert fields(events) == [{"jobId": "gh-1", "code": None, "detail": "unresolvable"}]
    assert fields(more) == [{"jobId": "-rf", "code": None, "detail": "argv-unusable"}]


async def test_when_the_hook_runs(tmp_path: Path) -> None:
    said = tmp_path / "said"
    fired, _ = hook(tmp_path, f'echo "$1 $2 $3" >> {said}')
    after = Aftermath(None, fired)
    after.ended("gh-1", {}, {"outcome": "completed", "reason": None}, {})
    after.ended("gh-2", {}, {"outcome": "policy", "reason": "unprotected-branch"}, {})  # a refusal: no hook
    after.ended("gh-3", {}, {"outcome": "policy", "reason": "runner-policy"}, {})
    after.failed("gh-4", {}, "operator-cancel")
    after.failed("gh-5", {}, "lock-lost")
    await after.close()
    await asyncio.sleep(0)
    assert sorted(said.read_text().splitlines()) == ["gh-3 policy runner-policy", "gh-5 failed lock-lost"]
