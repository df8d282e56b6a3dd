"""BullMQ's Worker, guarded against a job whose stored fields cannot even be read.

BullMQ parses a job's stored data as it takes it; data nested deeper than the interpreter can read, or not JSON
at all (anyone holding the store's password can write either), makes that parse raise every time the job is
taken, so the job is never run, never failed and never recorded, and its worker churns on it. This consumer
fails such a job for good, as a policy outcome with its own reason, and has it recorded like any other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bullmq import Job, UnrecoverableError, Worker

from pi_dispatch.reasons import Reason

Unreadable = Callable[[Any, Reason], None]


class GuardedConsumer(Worker):  # type: ignore[misc]  # bullmq is untyped
    """A BullMQ Worker whose `on_unreadable` hears of each job it had to fail unread (with the job and why)."""

    def __init__(self, name: str, processor: Any, opts: dict[str, Any], on_unreadable: Unreadable) -> None:
        super().__init__(name, processor, opts)
        self.on_unreadable = on_unreadable

    async def nextJobFromJobData(
        self,
        job_data: dict[str, Any] | None = None,
        job_id: str | None = None,
        limit_until: int = 0,
        delay_until: int = 0,
        token: str | None = None,
    ) -> Any:
        try:
            return await super().nextJobFromJobData(job_data, job_id, limit_until, delay_until, token)
        except (RecursionError, ValueError, TypeError) as error:
            if not job_data or not job_id or token is None:
                raise
            reason = Reason.JOB_TOO_DEEP if isinstance(error, RecursionError) else Reason.JOB_UNREADABLE
            await self._fail_unread(job_data, job_id, token, reason)
            return None

    async def _fail_unread(self, job_data: dict[str, Any], job_id: str, token: str, reason: Reason) -> None:
        name = job_data.get("name")
        job = Job(self, name if isinstance(name, str) else "", {}, {}, job_id)
        attempts = job_data.get("atm")
        job.attemptsMade = int(attempts) if isinstance(attempts, str) and attempts.isdigit() else 0
        job.opts["stackTraceLimit"] = 0
        await job.moveToFailed(UnrecoverableError(f"{reason}: the job's stored data cannot be read"), token)
        self.on_unreadable(job, reason)
