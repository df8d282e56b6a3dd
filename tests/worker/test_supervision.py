"""Every long-running loop of the worker under one supervisor: a fault injected into each loop, with a real
redis-server, Docker and BullMQ, and the worker either starts the loop again and goes on, or exits 1 with the reason;
never half-alive. And each upkeep step fails alone."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from pi_dispatch.fleet.registry import HostRegistry
from pi_dispatch.fleet.rehome import Rehomer
from pi_dispatch.fleet.storereset import EpochWatch
from pi_dispatch.infra import sdnotify
from pi_dispatch.infra.events import Recorder
from pi_dispatch.infra.supervise import Loop, OnFailure, ProcessFault, Supervisor
from pi_dispatch.worker import lifecycle
from pi_dispatch.worker.host.control import Control
from pi_dispatch.worker.host.storememory import StoreMemoryWatch
from pi_dispatch.worker.lifecycle import Worker
from pi_dispatch.worker.take.pickup import Pickup
from tests.support.helpers import failing_once, until
from tests.support.workers import CEILING_S, running_worker, settings_of, worker_env


def failures(events: Recorder, loop: str) -> list[dict[str, object]]:
    return [fields for event, fields in events.events if event == "loop_failed" and fields.get("loop") == loop]


# -- the supervisor alone


async def test_a_loop_that_fails_is_logged_once_with_its_traceback_and_started_again_with_backoff() -> None:
    log, slept, runs = Recorder(), [], []

    async def flaky() -> None:
        runs.append(1)
        if len(runs) < 3:
            raise KeyError("a bug")

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    supervisor = Supervisor(log, sleep=sleep)
    supervisor.start(Loop("flaky", flaky, OnFailure.RESTART, "test"))
    await until(lambda: len(runs) == 3, "the third run")
    await supervisor.close()
    assert len(runs) == 3 and slept == [1.0, 2.0] and not supervisor.ended.done()
    failed = failures(log, "flaky")
    assert len(failed) == 2 and failed[0]["error"] == "KeyError: 'a bug'" and failed[0]["then"] == "restart"
    trace = str(failed[0]["traceback"])
    assert "test_supervision:" in trace and "flaky" in trace and "/" not in trace  # frames by module, no paths
    assert [fields["restarts"] for event, fields in log.events if event == "loop_restarted"] == [1, 2]


async def test_a_stop_loop_that_fails_ends_the_process_and_a_process_fault_gives_its_reason() -> None:
    log = Recorder()

    async def broken() -> None:
        raise ValueError("no")

    async def deliberate() -> None:
        raise ProcessFault("the store has been unreachable for 20 s")

    supervisor = Supervisor(log)
    supervisor.start(Loop("broken", broken, OnFailure.STOP, "test"))
    assert await asyncio.wait_for(supervisor.ended, CEILING_S) == "its broken loop failed (ValueError)"
    again = Supervisor(log)
    again.start(Loop("deliberate", deliberate, OnFailure.RESTART, "test"))
    assert await asyncio.wait_for(again.ended, CEILING_S) == "the store has been unreachable for 20 s"
    assert failures(log, "deliberate") == []  # a deliberate end is its reason, not a traceback
    await supervisor.close()
    await again.close()


# -- each loop of a real worker


RESTARTED = {  # loop: (class, attribute) that the loop runs
    "rehome": (Rehomer, "run_forever"),
    "control": (Control, "listen"),
    "log-sweep": (lifecycle, "sweep_logs_forever"),
    "upkeep": (lifecycle.Upkeep, "run"),
}
STOPPED = {
    "beat": (HostRegistry, "beat_forever"),
    "health": (Worker, "_health"),
    "consumers": (Pickup, "run"),
}


@pytest.mark.redis
@pytest.mark.docker
@pytest.mark.parametrize("loop", sorted(RESTARTED))
async def test_a_worker_loop_that_fails_is_started_again_and_the_worker_goes_on(
    loop: str, tmp_path: Path, valkey_url: str, job_image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    owner, name = RESTARTED[loop]
    calls: list[int] = []
    monkeypatch.setattr(owner, name, failing_once(getattr(owner, name), calls))
    settings = settings_of(worker_env(tmp_path, valkey_url, job_image, "mini1"))
    async with running_worker(settings, beat_ms=200) as running:
        await until(lambda: len(calls) >= 2, f"the {loop} loop running again")
        assert not running.task.done()
        failed = failures(running.events, loop)
        assert len(failed) == 1 and failed[0]["then"] == "restart" and "Injected" in str(failed[0]["error"])
    assert running.task.result() == 0  # and it still drains and stops cleanly


@pytest.mark.redis
@pytest.mark.docker
@pytest.mark.parametrize("loop", sorted(STOPPED))
async def test_a_worker_loop_whose_failure_stops_the_worker_ends_it_with_exit_1(
    loop: str, tmp_path: Path, valkey_url: str, job_image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    owner, name = STOPPED[loop]
    monkeypatch.setattr(owner, name, failing_once(getattr(owner, name), []))
    settings = settings_of(worker_env(tmp_path, valkey_url, job_image, "mini1"))
    async with running_worker(settings, beat_ms=200) as running:
        status = await asyncio.wait_for(asyncio.shield(running.task), CEILING_S)
    assert status == 1
    failing = [fields for event, fields in running.events.events if event == "worker_failing"]
    assert failing == [{"reason": f"its {loop} loop failed (Injected)"}]
    assert len(failures(running.events, loop)) == 1


@pytest.mark.redis
@pytest.mark.docker
async def test_a_watchdog_feeder_that_fails_ends_the_worker_with_exit_1(
    tmp_path: Path, valkey_url: str, job_image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WATCHDOG_USEC", "60000000")
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    monkeypatch.setattr(lifecycle, "feed_watchdog", failing_once(sdnotify.feed_watchdog, []))
    settings = settings_of(worker_env(tmp_path, valkey_url, job_image, "mini1"))
    async with running_worker(settings, beat_ms=200) as running:
        status = await asyncio.wait_for(asyncio.shield(running.task), CEILING_S)
    assert status == 1 and len(failures(running.events, "watchdog")) == 1


@pytest.mark.redis
@pytest.mark.docker
async def test_an_upkeep_step_that_fails_every_beat_is_logged_once_and_skips_no_other_step(
    tmp_path: Path, valkey_url: str, job_image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*_: Any) -> None:
        raise TypeError("a bug in one step")

    epochs: list[int] = []
    original = EpochWatch.check

    async def counted(self: EpochWatch) -> bool:
        epochs.append(1)
        return await original(self)

    monkeypatch.setattr(StoreMemoryWatch, "check", broken)  # the second step
    monkeypatch.setattr(EpochWatch, "check", counted)  # a later one
    settings = settings_of(worker_env(tmp_path, valkey_url, job_image, "mini1"))
    async with running_worker(settings, beat_ms=100) as running:
        await until(lambda: len(epochs) >= 4, "four beats of the later step")
        monkeypatch.setattr(StoreMemoryWatch, "check", lambda *_: asyncio.sleep(0))
        await until(lambda: "upkeep_step_restored" in running.events.names(), "the step passing again")
    failed = [fields for event, fields in running.events.events if event == "upkeep_step_failed"]
    assert (
        len(failed) == 1
        and failed[0]["step"] == "store-memory"
        and failed[0]["error"] == "TypeError: a bug in one step"
    )
    assert failures(running.events, "upkeep") == []  # the loop itself never failed


async def test_a_loop_that_swallows_its_cancel_is_cancelled_again_until_it_ends() -> None:
    cancels: list[int] = []

    async def stubborn() -> None:
        while True:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                cancels.append(1)
                if len(cancels) == 1:
                    continue  # as a client library may, turning a cancel into its own timeout
                raise

    supervisor = Supervisor(Recorder())
    supervisor.start(Loop("stubborn", stubborn, OnFailure.RESTART, "test"))
    await asyncio.sleep(0)
    await asyncio.wait_for(supervisor.close(), CEILING_S)
    assert cancels == [1, 1]
