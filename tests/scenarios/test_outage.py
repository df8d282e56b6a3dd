"""Valkey dies mid-run and comes back: the mirror and registry fail fast, log once, and recover; no record is lost."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pi_dispatch.fleet.mirror import RunMirror, read_mirrored_runs
from pi_dispatch.fleet.registry import HostRegistry, LiveHosts, read_live_hosts
from pi_dispatch.infra.events import Recorder
from pi_dispatch.infra.valkey import connect
from pi_dispatch.testing.services import RedisServer
from pi_dispatch.worker.after.history import RunRecorder, read_records

pytestmark = [pytest.mark.redis, pytest.mark.slow]


def run(job_id: str) -> dict[str, str]:
    ended = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return {"jobId": job_id, "endedAt": ended, "host": "mini1", "outcome": "completed"}


async def wait_for(predicate: object, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if await predicate():  # type: ignore[operator]
            return True
        await asyncio.sleep(0.1)
    return False


async def test_killed_server_then_restart(private_redis: RedisServer, tmp_path: Path) -> None:
    log = Recorder()
    client = connect(private_redis.url, timeout_s=0.5)
    mirror = RunMirror(client, 7, log=log, timeout_s=0.5)
    recorder = RunRecorder(tmp_path, mirror, log)
    registry = HostRegistry(client, "mini1", log=log, timeout_s=0.5, beat_ms=200)
    await registry.start({"caps": "s:prod", "routes": "true"})

    recorder.record(run("before"))
    await recorder.settle()

    private_redis.stop()
    started = time.monotonic()
    assert await mirror.mirror(run("during-0"), "during-0") is False
    assert time.monotonic() - started < 10.0  # bounded: a dead server is not waited on
    for index in range(1, 4):
        recorder.record(run(f"during-{index}"))
    await recorder.settle()

    async def registry_noticed() -> bool:
        return log.names().count("host_registry_unreachable") > 0

    assert await wait_for(registry_noticed, 10)
    await asyncio.sleep(1.0)  # several more failed beats, which must not log again
    assert log.names().count("host_registry_unreachable") == 1
    assert log.names().count("run_mirror_failed") == 1

    private_redis.start()
    fresh = connect(private_redis.url)

    async def row_is_back() -> bool:
        return bool(await fresh.exists("host:h:mini1"))

    assert await wait_for(row_is_back, 10)

    async def restored_said() -> bool:  # the beat's reply may reach its coroutine after the row reaches the store
        return "host_registry_restored" in log.names()

    assert await wait_for(restored_said, 5)
    assert log.names().count("host_registry_restored") == 1
    recorder.record(run("after"))
    await recorder.settle()
    assert "run_mirror_restored" in log.names()

    on_disk = {record["jobId"] for record in read_records(tmp_path)}
    assert on_disk == {"before", "during-1", "during-2", "during-3", "after"}
    mirrored = await read_mirrored_runs(fresh)
    assert [record["jobId"] for record in mirrored.runs] == ["after"]  # the restarted server lost its memory
    assert set(recorder.unmirrored) == {"during-1", "during-2", "during-3"}  # kept for the store's return
    recorder.remirror()
    recorder.remirror()  # one pass at a time: a second call while the first runs starts nothing
    await recorder.settle()
    remirrored = await read_mirrored_runs(fresh)
    assert sorted(record["jobId"] for record in remirrored.runs) == ["after", "during-1", "during-2", "during-3"]
    assert recorder.unmirrored == {}
    hosts = await read_live_hosts(fresh)
    assert isinstance(hosts, LiveHosts) and [host["name"] for host in hosts.hosts] == ["mini1"]

    await registry.close()
    await client.aclose()
    await fresh.aclose()
