"""The operator's view of every queue, against a real redis-server and real BullMQ: counts, silence, the oldest
waiting jobs, the same across batch boundaries, and a broken queue left out without costing the others."""

from __future__ import annotations

import time

import pytest
import redis.asyncio as aioredis

from pi_dispatch.core.keys import SHARED_QUEUE, bull_key, host_queue_name, rehome_since_key
from pi_dispatch.fleet.queueview import BATCH, read_queues
from pi_dispatch.testing.jobs import forge_job
from tests.support.workers import open_queues

pytestmark = [pytest.mark.redis]


async def test_each_queue_with_its_counts_its_hosts_silence_and_its_oldest_jobs_first(
    client: aioredis.Redis, valkey_url: str
) -> None:
    busy, silent = host_queue_name("busy"), host_queue_name("gone")
    async with open_queues(valkey_url, (SHARED_QUEUE, busy, silent)) as queues:
        first = await queues[busy].add("github", forge_job(1), {"jobId": "first"})
        await queues[busy].add("github", forge_job(2), {"jobId": "second"})
        await queues[busy].add("github", forge_job(3), {"jobId": "later", "delay": 600_000})
        await queues[busy].add("github", forge_job(4), {"jobId": "urgent", "priority": 3})
        local = {"kind": "local", "folder": "/srv/app", "flow": "deps", "task": "t", "trigger": {"id": "n"}}
        await queues[silent].add("local", local, {"jobId": "repeat:n:1"})
        now = int(time.time() * 1000)
        await client.set(rehome_since_key("gone"), str(now - 60_000))
        rows = [{"name": "busy", "staleMs": 1_000}]
        read = await read_queues(client, [SHARED_QUEUE, busy, silent], rows, now, backlog=50)

    shared_view, busy_view, silent_view = read.queues
    assert (shared_view.queue, shared_view.counts.total, shared_view.silent_since_ms) == (SHARED_QUEUE, 0, None)
    assert (busy_view.counts.waiting, busy_view.counts.delayed, busy_view.counts.prioritized) == (2, 1, 1)
    assert busy_view.silent_since_ms is None  # its row is live
    assert busy_view.oldest_waiting_ms == int(first.timestamp)
    assert silent_view.silent_since_ms == now - 60_000  # the stored clock: it has no row
    assert [(job.queue, job.job_id, job.bound) for job in read.waiting] == [
        (busy, "first", False),
        (busy, "second", False),
        (silent, "repeat:n:1", True),
    ]
    assert read.waiting[0].data == forge_job(1)


async def test_a_read_over_many_batches_is_the_read_of_each_queue_and_a_broken_one_is_left_out(
    client: aioredis.Redis,
) -> None:
    names = [host_queue_name(f"h{number:04d}") for number in range(BATCH * 2 + 5)]
    pipe = client.pipeline(transaction=False)
    for number, queue in enumerate(names):
        for job in range(number % 3):
            pipe.hset(bull_key(queue, f"j{job}"), mapping={"data": "{}", "timestamp": str(1_000 + job)})
            pipe.lpush(bull_key(queue, "wait"), f"j{job}")
    await pipe.execute()
    broken = names[BATCH + 1]
    await client.delete(bull_key(broken, "wait"))
    await client.set(bull_key(broken, "wait"), "not a list")  # hostile: the script must not stop at it

    read = await read_queues(client, names, [], 5_000, backlog=1)
    shown = {view.queue: view.counts.waiting for view in read.queues}
    assert broken not in shown
    assert shown == {queue: number % 3 for number, queue in enumerate(names) if queue != broken}
    assert len(read.waiting) == sum(1 for number, queue in enumerate(names) if number % 3 and queue != broken)
    assert all(job.job_id == "j0" for job in read.waiting)  # backlog=1: each queue's oldest only
