"""How an attempt ends: the container exit-code protocol, and the two ways an attempt leaves without a result.

Exit 0 is completed; exit 2 is a policy refusal (returned, never retried); a timeout is `job-timeout` (not
retried); any other exit after the kernel killed a process of the job for passing its memory limit is
`job-oom-killed` (not retried: the same limit would kill it again); exit 1 or anything else is an infra failure
that BullMQ retries. A drain puts the job back on its
queue untouched. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from pi_dispatch.core.errors import PiDispatchError
from pi_dispatch.core.reasons import ExitCode, Outcome, Reason, job_result


class JobFailure(Exception):
    """A failed attempt: its reason and exit code are recorded; `retry` says whether BullMQ should retry."""

    def __init__(self, reason: Reason, exit_code: int | None = None, *, retry: bool) -> None:
        self.reason, self.exit_code, self.retry = reason, exit_code, retry
        self.telemetry: dict[str, object] = {}  # what a container that ran said it used, for the record
        super().__init__(reason if exit_code is None else f"{reason} (exit {exit_code})")


class DockerUnavailable(PiDispatchError):
    """The Docker daemon cannot be reached; worth another attempt, never the job's fault."""


class ImageMissing(PiDispatchError):
    """The job's image is not on this host."""


class PutBack(Exception):
    """The job goes back on its queue untouched: the worker is draining."""


class TakeUnconfirmed(PutBack):
    """The job's take is not on the node the Sentinels name primary (`infra/storeprobes.PrimaryCheck`): it is not
    run, and given back unspent where it was taken if that node still takes the write."""


def container_result(end: ContainerEnd) -> dict[str, object]:
    """The job's result from how its container ended, or the JobFailure / PutBack it ends as instead."""
    if end.aborted:
        raise PutBack
    if end.timed_out:
        raise JobFailure(Reason.WORKER_ABORT, end.exit_code, retry=False)
    if end.exit_code == ExitCode.OK:
        return job_result(Outcome.COMPLETED, None, ExitCode.OK)
    if end.exit_code == ExitCode.POLICY:
        return job_result(Outcome.POLICY, Reason.CONTAINER_POLICY, ExitCode.POLICY)
    if end.oom_killed:
        raise JobFailure(Reason.JOB_OOM_KILLED, end.exit_code, retry=False)
    raise JobFailure(Reason.CONTAINER_FAILED, end.exit_code, retry=True)


@dataclass(frozen=True)
class ContainerEnd:
    """How a job's container ended: its exit code, or why there is none worth reading."""

    exit_code: int | None
    timed_out: bool = False
    aborted: bool = False
    oom_killed: bool = False  # the kernel killed a process of the job for passing the container's memory limit
    stdout_tail: str = ""  # the last of its stdout, where the runner's exit line is (`core/runusage.py`)
