"""BullMQ's Worker, guarded against a job whose stored fields cannot even be read.

BullMQ parses a job's stored data as it takes it; data nested deeper than the interpreter can read, or not JSON
at all (anyone holding the store's password can write either), makes that parse raise every time the job is
taken, so the job is never run, never failed and never recorded, and its worker churns on it. This consumer
fails such a job for good, as a policy outcome with its own reason, and has it recorded like any other.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from typing import Any

from bullmq import Job, UnrecoverableError, Worker

from pi_dispatch.core.reasons import Reason
from pi_dispatch.fleet.steal import routed_to
from pi_dispatch.infra.valkey import reply_whole

Unreadable = Callable[[Any, Reason], None]


def node_client_name(queue: str, prefix: str = "bull", worker: str | None = None) -> str:
    """The name Node's BullMQ gives a worker's connections: the prefix, the queue's name in base64, and `:w:<name>`
    for a named worker."""
    return f"{prefix}:{base64.b64encode(queue.encode()).decode()}" + (f":w:{worker}" if worker else "")


class GuardedConsumer(Worker):  # type: ignore[misc]  # bullmq is untyped
    """A BullMQ Worker whose `on_unreadable` hears of each job it had to fail unread (with the job and why), and
    which keeps the times liveness is judged by: when it last asked the store for a job, when it last took one,
    and since when it has been waiting on a blocking pop (None when it is not)."""

    def __init__(self, name: str, processor: Any, opts: dict[str, Any], on_unreadable: Unreadable) -> None:
        super().__init__(name, processor, opts)
        # Named as Node's BullMQ names a worker's connections, so Node's tools (`Queue.getWorkers()`, bull-board)
        # list this worker among the queue's; the Python client's own name is the queue's plain key prefix.
        self.clientName = node_client_name(name, opts.get("prefix") or "bull", opts.get("name"))
        self.on_unreadable = on_unreadable
        self.polled_at_ms = 0  # wall clock, for the row and the metrics
        self.took_at_ms = 0
        self.blocked_since: float | None = None  # monotonic
        self.fetching_since: float | None = None

    def stalled_for(self, now: float) -> float:
        """How long the call that asks the store for a job has been waiting: 0 when none is in flight."""
        started = [since for since in (self.blocked_since, self.fetching_since) if since is not None]
        return now - min(started) if started else 0.0

    def _polled(self) -> None:
        self.polled_at_ms = int(time.time() * 1000)

    async def waitForJob(self) -> int:
        self.blocked_since = time.monotonic()
        try:
            return int(await super().waitForJob())
        finally:
            self.blocked_since = None
            self._polled()

    async def moveToActive(self, token: str) -> Any:
        self.fetching_since = time.monotonic()
        try:
            job = await super().moveToActive(token)
        finally:
            self.fetching_since = None
        self._polled()
        if job is not None:
            self.took_at_ms = self.polled_at_ms
        return job

    async def nextJobFromJobData(
        self,
        job_data: dict[str, Any] | None = None,
        job_id: str | None = None,
        limit_until: int = 0,
        delay_until: int = 0,
        token: str | None = None,
    ) -> Any:
        if job_data is not None and "data" not in job_data and job_id and token is not None:
            # its hash is gone (an evicting store, a hand's DEL) and BullMQ re-created it with its own fields only:
            # run as it is, it would be a job with no target, recorded completed
            await self._fail_unread(job_data, job_id, token, Reason.JOB_DATA_MISSING)
            return None
        try:
            job = await super().nextJobFromJobData(job_data, job_id, limit_until, delay_until, token)
        except (RecursionError, ValueError, TypeError) as error:
            if not job_data or not job_id or token is None:
                raise
            reason = Reason.JOB_TOO_DEEP if isinstance(error, RecursionError) else Reason.JOB_UNREADABLE
            await self._fail_unread(job_data, job_id, token, reason)
            return None
        if job is not None:
            job.routed_to = routed_to(job_data)  # set when the job was stolen: where the router had put it
        return job

    async def _fail_unread(self, job_data: dict[str, Any], job_id: str, token: str, reason: Reason) -> None:
        name = job_data.get("name")
        job = Job(self, name if isinstance(name, str) else "", {}, {}, job_id)
        attempts = job_data.get("atm")
        job.attemptsMade = reply_whole(attempts) or 0
        job.opts["stackTraceLimit"] = 0
        why = "is gone" if reason == Reason.JOB_DATA_MISSING else "cannot be read"
        await job.moveToFailed(UnrecoverableError(f"{reason}: the job's stored data {why}"), token)
        self.on_unreadable(job, reason)

    async def drop_connections(self) -> None:
        """Close this consumer's connections outright, for a close BullMQ could not finish (the store gone while a
        job's last write retries): its sockets go with the worker rather than with the collector, whenever."""
        if not self.closed:
            await self.backend.close(force=True)

    async def wait_for_markers(self, markers: list[str], timeout_s: float) -> Any:
        """One blocking pop on several queues' wake-up markers (this consumer's blocking connection), timed
        for liveness as BullMQ's own wait is."""
        self.blocked_since = time.monotonic()
        try:
            return await self.backend.bclient.bzpopmin(markers, timeout_s)
        finally:
            self.blocked_since = None
            self._polled()
