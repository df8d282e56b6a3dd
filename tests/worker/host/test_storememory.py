"""A full store (maxmemory with noeviction) is not an unreachable one: against a real redis-server, a real worker
and Docker, a job running while the store refuses writes keeps running, finishes once, and its record reaches the
mirror once the store takes writes; the worker says so once, with the store's memory, and never exits."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from bullmq import Queue

from pi_dispatch.fleet.mirror import read_mirrored_runs
from pi_dispatch.infra.valkey import connect
from pi_dispatch.testing.jobs import forge_job
from pi_dispatch.testing.services import RedisServer
from pi_dispatch.worker.after.history import read_records
from tests.support.workers import ContainerWatch, finished_job, job_in_state, running_worker, settings_of, worker_env

ONCE = {"attempts": 2, "backoff": {"type": "fixed", "delay": 200}}


@pytest.mark.docker
@pytest.mark.redis
@pytest.mark.slow
async def test_a_job_running_while_the_store_is_full_finishes_once_and_its_record_follows(
    tmp_path: Path, job_image: str, docker_client: Any
) -> None:
    (tmp_path / "store").mkdir()
    server = RedisServer(tmp_path / "store")
    server.start()
    queue, admin = Queue("pi-jobs", {"connection": server.url}), connect(server.url)
    try:
        env = worker_env(tmp_path, server.url, job_image, "full")  # a 2 s lock
        with ContainerWatch(docker_client, "gh-full") as watch:
            async with running_worker(settings_of(env), beat_ms=500) as w:
                await queue.add("github", forge_job(1, trigger={"demoSleep": 4}), {"jobId": "gh-full", **ONCE})
                await job_in_state(queue, "gh-full", ("active",))
                await watch.started()  # counted in the day's window first, a write the full store would refuse
                await admin.config_set("maxmemory", 1)  # full: each write that may grow it is refused
                await job_in_state(queue, "gh-full", ("completed",), timeout_s=30)  # its 4 s, and more, while full
                await asyncio.sleep(2)  # a lock's life more, the store still full
                assert not w.task.done()  # nor did BullMQ's finish wait for memory: a script freeing first may go on
                assert not (await read_mirrored_runs(admin)).runs  # its record waits for the store
                await admin.config_set("maxmemory", 0)
                done = await finished_job(queue, "gh-full")
                deadline = asyncio.get_running_loop().time() + 10
                while not (mirrored := await read_mirrored_runs(admin)).runs or (
                    "store_memory_restored" not in w.events.names()
                ):
                    assert asyncio.get_running_loop().time() < deadline, "no mirrored record, or no word of it"
                    await asyncio.sleep(0.2)
                assert not w.task.done()
        names = w.events.names()
    finally:
        await admin.config_set("maxmemory", 0)
        await queue.close()
        await admin.aclose()
        server.stop()
    assert done.returnvalue["outcome"] == "completed" and done.attemptsMade == 1
    assert watch.most == 1 and [record["jobId"] for record in read_records(w.logs_dir)] == ["gh-full"]
    assert [record["jobId"] for record in mirrored.runs] == ["gh-full"]
    said = [fields for event, fields in w.events.events if event == "store_out_of_memory"]
    assert len(said) == 1 and said[0]["maxMemory"] == 1 and said[0]["usedMemory"] > 1  # once a minute, with both
    assert names.count("store_memory_restored") == 1
    assert "job_fenced" not in names and "host_registry_unreachable" not in names
    assert [fields for event, fields in w.events.events if event == "worker_stopped"] == [{}]  # stopped by the test
    assert names.count("queue_error") <= 2  # the refusals are counted in the line, not logged one by one
