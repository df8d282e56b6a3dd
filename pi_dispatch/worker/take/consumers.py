"""BullMQ's Worker, guarded against a job whose stored fields cannot even be read.

BullMQ parses a job's stored data as it takes it; data nested deeper than the interpreter can read, or not JSON
at all (anyone holding the store's password can write either), makes that parse raise every time the job is
taken, so the job is never run, never failed and never recorded, and its worker churns on it. This consumer
fails such a job for good, as a policy outcome with its own reason, and has it recorded like any other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bullmq import Job, UnrecoverableError

from pi_dispatch.core.reasons import Reason
from pi_dispatch.fleet.steal import routed_to
from pi_dispatch.infra.bullmq import DrivenWorker
from pi_dispatch.infra.valkey import reply_whole

Unreadable = Callable[[Any, Reason], None]


class GuardedConsumer(DrivenWorker):
    """A BullMQ Worker (driven by the pickup, `infra/bullmq.py`) whose `on_unreadable` hears of each job it had to
    fail unread, with the job and why."""

    def __init__(self, name: str, processor: Any, opts: dict[str, Any], on_unreadable: Unreadable) -> None:
        super().__init__(name, processor, opts)
        self.on_unreadable = on_unreadable

    async def refused(self, job_data: dict[str, Any], job_id: str, token: str) -> bool:
        if "data" in job_data:
            return False
        # its hash is gone (an evicting store, a hand's DEL) and BullMQ re-created it with its own fields only:
        # run as it is, it would be a job with no target, recorded completed
        await self._fail_unread(job_data, job_id, token, Reason.JOB_DATA_MISSING)
        return True

    async def unreadable(self, job_data: dict[str, Any], job_id: str, token: str, error: Exception) -> None:
        reason = Reason.JOB_TOO_DEEP if isinstance(error, RecursionError) else Reason.JOB_UNREADABLE
        await self._fail_unread(job_data, job_id, token, reason)

    def taken(self, job: Any, job_data: dict[str, Any]) -> None:
        job.routed_to = routed_to(job_data)  # set when the job was stolen: where the router had put it

    async def _fail_unread(self, job_data: dict[str, Any], job_id: str, token: str, reason: Reason) -> None:
        name = job_data.get("name")
        job = Job(self, name if isinstance(name, str) else "", {}, {}, job_id)
        attempts = job_data.get("atm")
        job.attemptsMade = reply_whole(attempts) or 0
        job.opts["stackTraceLimit"] = 0
        why = "is gone" if reason == Reason.JOB_DATA_MISSING else "cannot be read"
        await job.moveToFailed(UnrecoverableError(f"{reason}: the job's stored data {why}"), token)
        self.on_unreadable(job, reason)
