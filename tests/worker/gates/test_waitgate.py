"""The wait gate: the label a check is given, and a fleet check lease that a failover makes untrusted. (Holds and
their arithmetic run end to end in tests/worker/test_lifecycle.py.)"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from pi_dispatch.infra.events import Recorder
from pi_dispatch.testing.jobs import forge_job, write_script
from pi_dispatch.testing.replicated import ReplicatedStore
from pi_dispatch.worker.gates.waitgate import WaitGate, wait_target
from tests.support.workers import settings_of, worker_env


def test_wait_target_is_the_id_only_label() -> None:
    assert wait_target(forge_job(7)) == "acme/app#7"
    assert wait_target({**forge_job(7), "kind": "gitlab", "target": {"type": "pull_request", "number": 7}}) == (
        "acme/app!7"
    )
    assert wait_target({"kind": "local", "folder": "/x"}) is None
    assert wait_target({**forge_job(7), "target": {"number": True}}) is None


async def until(condition: object, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "the condition did not hold in time"
        await asyncio.sleep(0.1)


@pytest.mark.redis
@pytest.mark.slow
async def test_no_check_runs_under_a_lease_granted_before_a_failover(tmp_path: Path) -> None:
    started, go, second_ran = tmp_path / "started", tmp_path / "go", tmp_path / "second-ran"
    slow = write_script(tmp_path / "slow", f"#!/bin/sh\ntouch {started}\nwhile [ ! -e {go} ]; do sleep 0.1; done\n")
    second = write_script(tmp_path / "second", f"#!/bin/sh\ntouch {second_ran}\n")
    with ReplicatedStore() as store:
        env = worker_env(tmp_path, "redis://127.0.0.1/0", "unused:image", "mini1") | store.env()
        env |= {"PI_WAIT_PROFILES": f"slow:{slow},second:{second}", "PI_WAIT_CHECK_TIMEOUT_MS": "60000"}
        client = store.address().client()
        events = Recorder()
        gate = WaitGate(settings_of(env), client, now=lambda: int(time.time() * 1000), jitter=lambda: 0.5, log=events)
        try:
            checking = asyncio.create_task(gate.run_checks(("slow", "second"), "acme/app#7", "gh-7"))
            await until(started.exists)
            old = store.primary()
            store.failover()  # the lease was granted on `old`; the Sentinels now promote a replica
            await until(lambda: store.primary() is not old and store.role(old) == "slave")
            go.touch()
            decision = await asyncio.wait_for(checking, 30)
        finally:
            await client.aclose()
    assert decision is not None and decision.verdict == "hold" and decision.aborted and not decision.fault
    assert not second_ran.exists()  # the second check would have run under a lease the new primary never granted
    assert events.names().count("wait_lease_untrusted") == 1


@pytest.mark.redis
async def test_a_check_holds_a_slot_as_a_node_host_would_and_waits_while_node_holds_them_all(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis
) -> None:
    started, go = tmp_path / "started", tmp_path / "go"
    slow = write_script(tmp_path / "slow", f"#!/bin/sh\ntouch {started}\nwhile [ ! -e {go} ]; do sleep 0.05; done\n")
    env = worker_env(tmp_path, valkey_url, "unused:image", "mini1", PI_WAIT_PROFILES=f"slow:{slow}")
    gate = WaitGate(settings_of(env), client, now=lambda: int(time.time() * 1000), jitter=lambda: 0.5)
    checking = asyncio.create_task(gate.run_checks(("slow",), "acme/app#7", "gh-7"))
    await until(started.exists)
    assert await client.get("wait:check:0") == b"mini1#gh-7"  # the reference's holder, on its key
    assert 0 < await client.pttl("wait:check:0") <= 2 * 30_000
    go.touch()
    assert (decision := await asyncio.wait_for(checking, 30)) is not None and decision.verdict == "go"
    assert await client.exists("wait:check:0") == 0  # released by its holder
    await client.set("wait:check:0", "node1#gh-9", px=60_000)  # a Node host's check holds the fleet's one slot
    assert await gate.run_checks(("slow",), "acme/app#8", "gh-8") is None  # no slot: the job waits
    assert await client.get("wait:check:0") == b"node1#gh-9"
