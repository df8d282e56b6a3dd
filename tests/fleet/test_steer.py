"""Steering jobs against a real redis-server and real BullMQ: where a job is, cancel, retry, the control facts."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from bullmq import Queue, UnrecoverableError
from bullmq import Worker as BullWorker

from pi_dispatch.core.keys import bull_key, cancel_key, run_attempts_key, run_record_key
from pi_dispatch.core.names import record_stem
from pi_dispatch.fleet.control import Drain, cancelled_of, parse_message, read_drain, request_cancel, request_drain
from pi_dispatch.fleet.enqueue import forge_job_options
from pi_dispatch.fleet.locate import candidate_queues, locate
from pi_dispatch.fleet.steer import cancel_job, failed_jobs, retry_job
from pi_dispatch.infra.clock import wall_ms
from pi_dispatch.infra.store import StoreAddress
from pi_dispatch.testing.jobs import forge_job
from tests.support.workers import open_queues, registered_hosts

pytestmark = [pytest.mark.redis]
QUEUES = ["pi-jobs", "pi-jobs@mini1", "pi-jobs@mini2"]


@pytest.fixture
async def queues(valkey_url: str) -> AsyncIterator[dict[str, Queue]]:
    async with open_queues(valkey_url, QUEUES) as opened:
        yield opened


@pytest.fixture
async def fleet(client: aioredis.Redis) -> AsyncIterator[None]:
    """mini1 serves prod, mini2 does not: a prod job routes to mini1's queue."""
    async with registered_hosts(client, {"mini1": "s:prod", "mini2": ""}):
        yield


async def add(queue: Queue, number: int, **fields: Any) -> str:
    data = forge_job(number, **fields)
    options = {key: value for key, value in forge_job_options("github", data).items() if key != "deduplication"}
    job = await queue.add("github", data, options)
    return str(job.id)


async def finish(url: str, queue: str, job_id: str, *, fail: bool) -> None:
    """Run the job through a plain BullMQ worker that fails it for good, or completes it."""

    async def process(job: Any, token: str) -> str:
        if fail:
            raise UnrecoverableError("container-failed (exit 1)")
        return "done"

    consumer = BullWorker(queue, process, {"connection": url, "autorun": False})
    running = asyncio.ensure_future(consumer.run())
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            found = await consumer.client.zscore(bull_key(queue, "failed" if fail else "completed"), job_id)
            if found is not None:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"{job_id} did not finish")
    finally:
        await consumer.close()
        await running


async def test_a_job_is_found_on_its_queue_in_its_state(client: aioredis.Redis, queues: dict[str, Queue]) -> None:
    waiting = await add(queues["pi-jobs@mini1"], 1)
    delayed_job = await queues["pi-jobs"].add("github", forge_job(2), {"jobId": "gh-late", "delay": 60_000})
    assert [(found.queue, found.state) for found in await locate(client, waiting, QUEUES)] == [
        ("pi-jobs@mini1", "waiting")
    ]
    (late,) = await locate(client, str(delayed_job.id), QUEUES)
    assert late.state == "delayed" and late.due_ms is not None and late.due_ms > wall_ms() + 50_000
    assert late.attempts_allowed == 1 and not late.finished and late.data["repo"] == "acme/app"
    assert await locate(client, "gh-nothing", QUEUES) == []
    assert await client.type(bull_key("pi-jobs@mini1", "meta")) == b"hash"  # the queue's own keys are there ...
    await client.set(bull_key("pi-jobs@mini1", f"{waiting}:lock"), "a-token")
    for own in ("meta", "events", "wait", "delayed", f"{waiting}:lock"):  # ... and no id finds one as a job
        assert await locate(client, own, QUEUES) == [], own
    assert candidate_queues([{"name": "mini2"}], ["mini1", None, "../x"]) == [
        "pi-jobs",
        "pi-jobs@mini1",
        "pi-jobs@mini2",
    ]


async def test_a_waiting_job_is_cancelled_where_it_stands_and_its_cancel_recorded(
    client: aioredis.Redis, queues: dict[str, Queue]
) -> None:
    job_id = await add(queues["pi-jobs@mini1"], 3)
    done = await cancel_job(client, job_id, QUEUES, now=wall_ms, wait_s=5)
    assert (done.result, done.was) == ("cancelled", "queued")
    (job,) = await locate(client, job_id, QUEUES)
    assert (job.state, job.failed_reason) == ("failed", "operator-cancel")
    assert job.data["target"]["number"] == 3  # its data stays, for a retry
    assert await client.lpos(bull_key("pi-jobs@mini1", "wait"), job_id) is None
    record = json.loads(await client.get(run_record_key(record_stem(job_id))))
    assert (record["outcome"], record["reason"], record["host"]) == ("failed", "operator-cancel", "mini1")
    assert await client.llen(run_attempts_key(record_stem(job_id))) == 1
    assert await client.exists(cancel_key(record_stem(job_id)))
    again = await cancel_job(client, job_id, QUEUES, now=wall_ms, wait_s=5)
    assert again.result == "finished"  # nothing changes the second time
    assert (await cancel_job(client, "gh-missing", QUEUES, now=wall_ms, wait_s=1)).result == "missing"


async def test_a_held_job_that_a_worker_holds_is_left_to_its_host(
    client: aioredis.Redis, queues: dict[str, Queue]
) -> None:
    job_id = await add(queues["pi-jobs"], 4)
    await client.lrem(bull_key("pi-jobs", "wait"), 0, job_id)  # as a worker's fetch leaves it: active, locked
    await client.lpush(bull_key("pi-jobs", "active"), job_id)
    await client.set(bull_key("pi-jobs", f"{job_id}:lock"), "token", px=30_000)
    done = await cancel_job(client, job_id, QUEUES, now=wall_ms, wait_s=0.3)
    assert (done.result, done.was) == ("pending", "active")  # the fact waits for its host
    assert await cancelled_of(client, [job_id, "gh-other"]) == [job_id]


async def test_a_cancelled_or_failed_job_runs_again_routed_anew(
    client: aioredis.Redis, valkey_url: str, queues: dict[str, Queue], fleet: None
) -> None:
    job_id = await add(queues["pi-jobs@mini2"], 5, secretsProfile="prod", secrets={"T": "x"})
    await cancel_job(client, job_id, QUEUES, now=wall_ms, wait_s=5)
    done = await retry_job(client, StoreAddress(valkey_url), job_id, QUEUES)
    assert (done.result, done.queue) == ("queued", "pi-jobs@mini1")  # where the live fleet routes prod now
    (job,) = await locate(client, job_id, QUEUES)
    assert (job.queue, job.state, job.attempts_made) == ("pi-jobs@mini1", "waiting", 0)
    assert not await client.exists(cancel_key(record_stem(job_id)))  # the cancel is lifted
    unfinished = await retry_job(client, StoreAddress(valkey_url), job_id, QUEUES)
    assert unfinished.result == "unfinished" and unfinished.job is not None and unfinished.job.state == "waiting"

    await finish(valkey_url, "pi-jobs@mini1", job_id, fail=True)
    assert await failed_jobs(client, QUEUES, since_ms=0, host=None) == [(job_id, "pi-jobs@mini1")]
    assert await failed_jobs(client, QUEUES, since_ms=0, host="mini2") == [(job_id, "pi-jobs@mini1")]  # its record
    await client.delete(run_record_key(record_stem(job_id)))
    assert await failed_jobs(client, QUEUES, since_ms=0, host="mini1") == [(job_id, "pi-jobs@mini1")]  # by its queue
    assert await failed_jobs(client, QUEUES, since_ms=0, host="mini2") == []
    assert await failed_jobs(client, QUEUES, since_ms=wall_ms() + 60_000, host=None) == []
    assert (await retry_job(client, StoreAddress(valkey_url), job_id, QUEUES)).result == "queued"

    plain = await add(queues["pi-jobs"], 6)
    await finish(valkey_url, "pi-jobs", plain, fail=False)
    assert (await retry_job(client, StoreAddress(valkey_url), plain, QUEUES)).result == "succeeded"
    assert (await retry_job(client, StoreAddress(valkey_url), "gh-missing", QUEUES)).result == "missing"


async def test_drain_and_cancel_are_facts_with_a_message(client: aioredis.Redis) -> None:
    async with client.pubsub() as pubsub:
        await pubsub.subscribe("control:events")
        await request_drain(client, "mini1", Drain(1_000, 61_000))
        await request_cancel(client, "gh-7", 2_000)
        await request_drain(client, "mini1", None)
        messages = []
        deadline = time.monotonic() + 30
        while len(messages) < 3 and time.monotonic() < deadline:
            received = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1)
            if received is not None:
                messages.append(parse_message(received["data"]))
    assert messages == [("drain", "mini1"), ("cancel", "gh-7"), ("resume", "mini1")]
    assert await read_drain(client, "mini1") is None
    await request_drain(client, "mini2", Drain(5, None))
    assert await read_drain(client, "mini2") == Drain(5, None)
    assert Drain.parse(b"not json") == Drain(0)  # an unreadable fact still drains
    assert parse_message(b'{"cancel": 7}') is None and parse_message(b"[]") is None
