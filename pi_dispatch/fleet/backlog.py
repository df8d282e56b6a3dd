"""What waits that each host could run, for `hosts`, `top` and `audit --live`.

The oldest jobs on the shared queue and on each host queue (at most BACKLOG_READ per queue, read with their
queues by `fleet/queueview.py`), matched against each live row: a host could run a job waiting on its own queue,
one on the shared queue whose needs its caps meet, and (a named host, by stealing) one on a peer's queue whose
needs it meets and that is not bound to its host.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from pi_dispatch.core.capabilities import is_live, job_needs, out_of_service, serving_caps
from pi_dispatch.core.jscompat import finite, js_number
from pi_dispatch.core.keys import SHARED_QUEUE, host_queue_name
from pi_dispatch.fleet.hosts import FleetHost
from pi_dispatch.fleet.steal import Waiting

BACKLOG_READ: Final = 50  # per queue: a count at this many reads "50+"


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


@dataclass(frozen=True)
class _Grouped:
    """The jobs read, grouped so that a host is matched per distinct need set, not per job."""

    own: Counter[str]  # every job, by queue
    shared: Counter[frozenset[str]]  # the shared queue's, by needs
    stealable: Counter[frozenset[str]]  # the host queues' that a capable peer may steal, by needs
    stealable_on: dict[str, Counter[frozenset[str]]]  # the same, by the queue they wait on
    oldest: dict[frozenset[str], list[Waiting]]  # the shared and stealable ones, by needs, oldest first

    @classmethod
    def of(cls, waiting: Sequence[Waiting]) -> _Grouped:
        grouped = cls(Counter(), Counter(), Counter(), defaultdict(Counter), defaultdict(list))
        for job in waiting:
            grouped.own[job.queue] += 1
            if not isinstance(job.data, dict):
                continue
            needs = frozenset(job_needs(job.data))
            if job.queue == SHARED_QUEUE:
                grouped.shared[needs] += 1
            elif not job.bound and not job.stolen_already:
                grouped.stealable[needs] += 1
                grouped.stealable_on[job.queue][needs] += 1
            else:
                continue
            grouped.oldest[needs].append(job)
        for jobs in grouped.oldest.values():
            jobs.sort(key=lambda job: job.enqueued_ms)
        return grouped


def runnable(rows: Sequence[Mapping[str, object]], waiting: Sequence[Waiting]) -> dict[str, int]:
    """How many of the jobs read each live host could run (`could_run`), by host name, in rows x need sets."""
    grouped = _Grouped.of(waiting)
    counts = {}
    for row in rows:
        if not is_live(row) or out_of_service(row):
            continue
        name, caps = str(row.get("name")), serving_caps(row)
        queue = host_queue_name(name)
        total = grouped.own[queue] + sum(count for needs, count in grouped.shared.items() if needs <= caps)
        if row.get("routes") == "true":  # a declared name: it steals (`FleetHost.of_row(row).routes`)
            total += sum(count for needs, count in grouped.stealable.items() if needs <= caps)
            total -= sum(count for needs, count in grouped.stealable_on.get(queue, {}).items() if needs <= caps)
        counts[name] = total
    return counts


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
    grouped = _Grouped.of(waiting)
    found = []
    for row in rows:
        free, beat = js_number(row.get("slotsFree")), js_number(row.get("beatAt"))
        if not is_live(row) or out_of_service(row) or not finite(free) or free < 1 or not finite(beat):
            continue
        name = str(row.get("name"))
        own, caps, steals = host_queue_name(name), serving_caps(row), FleetHost.of_row(row).routes == "true"
        late_before = beat - after_ms[name] - beat_ms
        late = [
            next((job for job in jobs if job.queue != own and (steals or job.queue == SHARED_QUEUE)), None)
            for needs, jobs in grouped.oldest.items()
            if needs <= caps
        ]
        oldest = min(
            (job for job in late if job is not None and 0 < job.enqueued_ms < late_before),
            key=lambda job: job.enqueued_ms,
            default=None,
        )
        if oldest is not None:
            found.append(IdleCapable(name, int(free), oldest, int(beat) - oldest.enqueued_ms))
    return found
