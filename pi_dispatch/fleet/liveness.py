"""Liveness beyond the heartbeat: is this worker's queue consumer still taking jobs? Pure.

A heartbeat says the process runs; it does not say the consumer asks the store for jobs. A consumer waiting on
a blocking pop that never returns (a half-open connection) leaves a host that beats, is routed to, and takes
nothing. Its row says so (`consumer: stuck`, and the times it last polled and took a job), routers leave it out,
and the worker exits 1 for systemd to start it again. Row fields reuse the reference's newer names (`jobs`,
`jobsMore`) where it has them.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from pi_dispatch.core.capabilities import CONSUMER_STUCK, is_live, is_stuck, out_of_service
from pi_dispatch.core.jscompat import finite, js_number
from pi_dispatch.fleet.registry import HOST_BEAT_MS

# An idle consumer's blocking pop returns every IDLE_POLL_S (BullMQ's drainDelay), and never later than BullMQ's
# 10 s ceiling (when a delayed job is due); a call in flight three times that long is not coming back.
IDLE_POLL_S: Final = 5.0
BLOCK_CEILING_S: Final = 10.0
CONSUMER_STUCK_S: Final = 3 * BLOCK_CEILING_S
# A reader sees a poll through the row, which can be a beat behind.
POLL_SILENCE_S: Final = CONSUMER_STUCK_S + HOST_BEAT_MS / 1000
ROW_JOBS_MAX: Final = 32  # the reference's cap on the `jobs` list
_ROW_JOB_ID: Final = re.compile(r"[A-Za-z0-9._:-]{1,128}")


class Consumer(Protocol):
    name: str
    polled_at_ms: int
    took_at_ms: int

    def stalled_for(self, now: float) -> float: ...


@dataclass(frozen=True)
class Stuck:
    queue: str
    seconds: float

    @property
    def reason(self) -> str:
        return f"the consumer of {self.queue} has waited {self.seconds:.0f} s on the store for a job (stuck)"


def stuck_consumer(consumers: Sequence[Consumer], now: float, after_s: float = CONSUMER_STUCK_S) -> Stuck | None:
    """The first consumer whose call for a job has been in flight longer than after_s, if any."""
    for consumer in consumers:
        waited = consumer.stalled_for(now)
        if waited > after_s:
            return Stuck(consumer.name, waited)
    return None


def row_job_id(job_id: str) -> str:
    """A job id as the row may carry it: as is when plain, else `sha256:` and 16 hex (the reference's rule)."""
    if _ROW_JOB_ID.fullmatch(job_id):
        return job_id
    return "sha256:" + hashlib.sha256(job_id.encode()).hexdigest()[:16]


def progress_facts(
    consumers: Sequence[Consumer],
    running: Mapping[str, int],
    concurrency: int,
    stuck: bool,
    held: int | None = None,
) -> dict[str, str]:
    """The row's progress fields: when a consumer last polled and took a job, the jobs running (id and start, at
    most 32 listed, the rest counted), the free slots (less the jobs `held`: taken and not yet ended, gates
    included; the running ones when not given), and whether the consumer is stuck."""
    listed = [{"id": row_job_id(job_id), "p": None, "at": at} for job_id, at in list(running.items())[:ROW_JOBS_MAX]]
    return {
        "polledAt": str(max((consumer.polled_at_ms for consumer in consumers), default=0) or ""),
        "tookAt": str(max((consumer.took_at_ms for consumer in consumers), default=0) or ""),
        "jobs": json.dumps(listed, separators=(",", ":")),
        "jobsMore": str(max(0, len(running) - ROW_JOBS_MAX)),
        "slotsFree": str(max(0, concurrency - (len(running) if held is None else held))),
        "consumer": CONSUMER_STUCK if stuck else "ok",
    }


@dataclass(frozen=True)
class NotDraining:
    """A live host that takes no job, and the evidence: its row says stuck, or it has not polled for longer
    than POLL_SILENCE_S with slots free."""

    stuck: bool
    slots_free: int | None
    polled_ago_s: float | None

    def evidence(self) -> list[str]:
        return [
            "its row says its queue consumer is stuck" if self.stuck else "it takes no job",
            f"{self.slots_free} slots free" if self.slots_free is not None else "free slots unknown",
            f"last poll {self.polled_ago_s:.0f} s ago" if self.polled_ago_s is not None else "no poll recorded",
        ]


def not_draining(row: Mapping[str, object], now_ms: int) -> NotDraining | None:
    """Whether a registry row (as `read_live_hosts` gives it) shows a live host that does not drain its queue.
    A row from a reader without progress fields (the Node reference) is never flagged."""
    if not is_live(row) or out_of_service(row):  # drained or unhealthy: it takes no job on purpose
        return None
    polled, free = js_number(row.get("polledAt")), js_number(row.get("slotsFree"))
    polled_ago_s = (now_ms - polled) / 1000 if finite(polled) and polled > 0 else None
    slots_free = int(free) if finite(free) else None
    silent = polled_ago_s is not None and polled_ago_s > POLL_SILENCE_S and bool(slots_free)
    if not is_stuck(row) and not silent:
        return None
    return NotDraining(is_stuck(row), slots_free, polled_ago_s)
