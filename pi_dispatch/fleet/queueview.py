"""Every queue an operator is shown, read in one round trip whatever the store holds: `hosts`, `top` and
`audit --live` see the same counts, re-home clocks and oldest waiting jobs.

One script (`lua/queue_view.lua`) reads a batch of queues: their five counts, their host's re-home clock, the
timestamp of the job waiting longest, and the fields of the oldest waiting jobs (`fleet/backlog.py`); the batches
go in one pipeline. Per queue the store does what a pipeline would, but the reader parses one reply per batch
rather than a dozen per queue, which is what kept a frame of a few thousand hosts from being read in a second.
A batch is BATCH queues, so no call holds the store's thread for long.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from pi_dispatch.core.keys import SHARED_QUEUE, bull_key, rehome_since_key, worker_of_queue
from pi_dispatch.fleet.hosts import HostQueue, QueueCounts, silent_since
from pi_dispatch.fleet.steal import JOB_FIELDS, Waiting, parse_waiting
from pi_dispatch.infra.valkey import OP_TIMEOUT_S, bounded, packaged_script, reply_text, reply_whole

if TYPE_CHECKING:
    import redis.asyncio as aioredis

BATCH: Final = 100  # queues per script call


@dataclass(frozen=True)
class QueuesRead:
    """The queues asked for, in their order (the shared queue's silence is always None; one whose keys are not
    BullMQ's is left out), and the oldest jobs waiting on each, oldest first per queue."""

    queues: list[HostQueue]
    waiting: list[Waiting]


async def read_queues(
    client: aioredis.Redis,
    queues: Sequence[str],
    rows: Sequence[Mapping[str, object]],
    now_ms: int,
    *,
    backlog: int,
    timeout_s: float = OP_TIMEOUT_S,
) -> QueuesRead:
    """Each queue with its counts, its host's silence and its oldest waiting job's age, and up to `backlog` of its
    oldest waiting jobs (0: none), in one round trip."""
    if not queues:
        return QueuesRead([], [])
    script = client.register_script(packaged_script("queue_view"))
    pipe = client.pipeline(transaction=False)
    for start in range(0, len(queues), BATCH):
        batch = queues[start : start + BATCH]
        per_queue = [
            key for queue in batch for key in (bull_key(queue, ""), rehome_since_key(worker_of_queue(queue) or ""))
        ]
        args = [str(backlog), str(len(JOB_FIELDS)), *JOB_FIELDS, *per_queue]
        await script(args=args, client=pipe)  # queued on the pipeline, sent with the batch
    answers = [answer for batch in await bounded(pipe.execute(), timeout_s) for answer in batch]
    by_name = {str(row.get("name")): row for row in rows}
    found, waiting = [], []
    per_job = 1 + len(JOB_FIELDS)
    for queue, answer in zip(queues, answers, strict=True):
        if not isinstance(answer, list):
            continue  # its keys are not BullMQ's: left out, the others shown
        host = worker_of_queue(queue) or ""
        counts = QueueCounts(*map(int, answer[:5]))
        since = None if queue == SHARED_QUEUE else silent_since(by_name.get(host), reply_whole(answer[5]), now_ms)
        found.append(HostQueue(queue, host, counts, since, reply_whole(answer[6])))
        jobs = answer[7:]
        for index in range(0, len(jobs) - per_job + 1, per_job):
            job = parse_waiting(queue, reply_text(jobs[index]), jobs[index + 1 : index + per_job])
            if job is not None:
                waiting.append(job)
    return QueuesRead(found, waiting)
