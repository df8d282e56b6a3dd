"""What follows an attempt's end beyond its record: the forge's comment (`forgecomments.py`), and the operator's
failure hook, `PI_ON_FAILURE`, as the reference runs it.

The hook runs for a run the runner stopped (`runner-policy` and the runner's own policy reasons) and for BullMQ's
final failure of a job, never for a completion, a refusal before the container, an attempt that will be retried or
an operator's cancel. Its argv is `<command> <jobId> <outcome> <reason> <host>`, no shell, no stdin or output, the
worker's environment; the command is resolved (its realpath, a regular file with an execute bit) when it fires; a
reason that is not a plain token is `infra`, and an argument that reads as an option spawns nothing. Past its time
it gets SIGTERM, then SIGKILL 2 s later. One log line `on_failure` says how it ended; it never fails the job.
"""

from __future__ import annotations

import asyncio
import re
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from pi_dispatch.core.reasons import Reason
from pi_dispatch.infra.events import EventLog
from pi_dispatch.worker.after.forgecomments import ForgeComments
from pi_dispatch.worker.gates.scripts import usable_script

HOOK_REASON: Final = re.compile(r"[a-z0-9-]{1,40}")
KILL_AFTER_S: Final = 2.0
# The policy results the hook runs for: the runner stopped the run (its own reasons with it)
HOOK_POLICY_REASONS: Final = frozenset(
    str(reason)
    for reason in (
        Reason.WORKER_ABORT,
        Reason.RUNNER_POLICY,
        Reason.PROVIDER_AUTH_REFUSED,
        Reason.COST_CAP,
        Reason.MODEL_NOT_ALLOWED,
        Reason.COST_CAP_UNENFORCEABLE,
        Reason.MODEL_POLICY_UNENFORCEABLE,
    )
)


def hook_argv(command: str, job_id: str, outcome: str, reason: str, host: str) -> list[str] | None:
    """The hook's argv, or None when an argument is missing or reads as an option."""
    reason = reason if HOOK_REASON.fullmatch(reason) else str(Reason.INFRA)
    arguments = [job_id, outcome, reason]
    if not all(arguments) or any(argument.startswith("-") for argument in [*arguments, host]):
        return None
    return [command, *arguments, host]


@dataclass
class FailureHook:
    """`PI_ON_FAILURE` on this host."""

    command: Path
    timeout_s: float
    host: str
    log: EventLog

    async def fire(self, job_id: str, outcome: str, reason: str) -> None:
        resolved = usable_script(str(self.command))
        argv = hook_argv(str(resolved or ""), job_id, outcome, reason, self.host)
        if resolved is None or argv is None:
            detail = "unresolvable" if resolved is None else "argv-unusable"
            self.log("on_failure", {"jobId": job_id, "code": None, "detail": detail})
            return
        quiet = asyncio.subprocess.DEVNULL
        try:
            process = await asyncio.create_subprocess_exec(*argv, stdin=quiet, stdout=quiet, stderr=quiet)
        except OSError:
            self.log("on_failure", {"jobId": job_id, "code": None, "detail": "spawn"})
            return
        detail = "exit"
        try:
            await asyncio.wait_for(process.wait(), self.timeout_s)
        except TimeoutError:
            detail = "timeout"
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), KILL_AFTER_S)
            except TimeoutError:
                process.kill()
                await process.wait()
        code = process.returncode
        if detail == "exit" and code is not None and code < 0:
            detail = f"signal-{signal.Signals(-code).name}"
        self.log("on_failure", {"jobId": job_id, "code": code if code is None or code >= 0 else None, "detail": detail})


@dataclass
class Aftermath:
    """The forge's comment and the failure hook, each when this host has one; posted and run in the background."""

    comments: ForgeComments | None = None
    hook: FailureHook | None = None
    running: set[asyncio.Task[None]] = field(default_factory=set)

    def ended(self, job_id: str, data: Mapping[str, Any], result: Mapping[str, Any], words: Mapping[str, str]) -> None:
        if self.comments is not None:
            self.comments.ended(job_id, data, result, words)
        if result.get("outcome") == "policy" and str(result.get("reason")) in HOOK_POLICY_REASONS:
            self._run_hook(job_id, "policy", str(result.get("reason")))

    def failed(self, job_id: str, data: object, reason: str) -> None:
        """BullMQ's final failure of a job (an operator's cancel runs no hook)."""
        if self.comments is not None:
            self.comments.failed(job_id, data, reason)
        if reason not in (Reason.OPERATOR_CANCEL, Reason.CANCELLED):
            self._run_hook(job_id, "failed", reason)

    def _run_hook(self, job_id: str, outcome: str, reason: str) -> None:
        if self.hook is not None:
            task = asyncio.ensure_future(self.hook.fire(job_id, outcome, reason))
            self.running.add(task)
            task.add_done_callback(self.running.discard)

    async def close(self) -> None:
        if self.comments is not None:
            await self.comments.close()
        if self.running:
            await asyncio.gather(*self.running, return_exceptions=True)
