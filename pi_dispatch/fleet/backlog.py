"""What waits that each host could run, for `hosts`, `top` and `audit --live`.

The oldest jobs on the shared queue and on each host queue (at most BACKLOG_READ per queue), read in two round
trips whatever the store holds, matched against each live row: a host could run a job waiting on its own queue,
one on the shared queue whose needs its caps meet, and (a named host, by stealing) one on a peer's queue whose
needs it meets and that is not bound to its host.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from pi_dispatch.core.capabilities import is_draining, is_live, job_needs, serving_caps
from pi_dispatch.core.jscompat import finite, js_number
from pi_dispatch.core.keys import SHARED_QUEUE, host_queue_name
from pi_dispatch.fleet.hosts import FleetHost
from pi_dispatch.fleet.steal import Waiting, read_waiting

if TYPE_CHECKING:
    import redis.asyncio as aioredis

BACKLOG_READ: Final = 50  # per queue: a count at this many reads "50+"


async def read_backlog(client: aioredis.Redis, host_queues: Sequence[str]) -> list[Waiting]:
    """The oldest jobs waiting on the shared queue and on each host queue."""
    return await read_waiting(client, [SHARED_QUEUE, *host_queues], BACKLOG_READ)


def could_run(row: Mapping[str, object], job: Waiting) -> bool:
    """Whether the host of this live row could take the job now, as its pickup would."""
    name = str(row.get("name"))
    if job.queue == host_queue_name(name):
        return True
    if not isinstance(job.data, dict) or not serving_caps(row).issuperset(job_needs(job.data)):
        return False
    if job.queue == SHARED_QUEUE:
        return True
    return FleetHost.of_row(row).routes == "true" and not job.bound and not job.stolen_already


def runnable(rows: Sequence[Mapping[str, object]], waiting: Sequence[Waiting]) -> dict[str, int]:
    """How many of the jobs read each live host could run, by host name."""
    return {
        str(row.get("name")): sum(1 for job in waiting if could_run(row, job))
        for row in rows
        if is_live(row) and not is_draining(row)
    }


def shown_count(count: int | None) -> str:
    if count is None:
        return "-"
    return f"{count}+" if count >= BACKLOG_READ else str(count)


@dataclass(frozen=True)
class IdleCapable:
    """A live host with free slots while a job it could run waited longer than stealing should have let it."""

    host: str
    slots_free: int
    job: Waiting
    waited_ms: int


def idle_capable(
    rows: Sequence[Mapping[str, object]], waiting: Sequence[Waiting], after_ms: Mapping[str, int], beat_ms: int
) -> list[IdleCapable]:
    """Each live, undrained host whose row, written a beat after a job it could run on someone else's queue had
    waited its stealing delay (`after_ms` by host name), still had free slots (its oldest such job)."""
    found = []
    for row in rows:
        delay_ms = after_ms[str(row.get("name"))]
        free = js_number(row.get("slotsFree"))
        beat = js_number(row.get("beatAt"))
        if not is_live(row) or is_draining(row) or not finite(free) or free < 1 or not finite(beat):
            continue
        own = host_queue_name(str(row.get("name")))
        late = [
            job
            for job in waiting
            if job.queue != own and job.enqueued_ms and beat - job.enqueued_ms > delay_ms + beat_ms
            and could_run(row, job)
        ]  # fmt: skip
        if late:
            oldest = min(late, key=lambda job: job.enqueued_ms)
            found.append(IdleCapable(str(row.get("name")), int(free), oldest, int(beat) - oldest.enqueued_ms))
    return found
