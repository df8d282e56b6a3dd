"""Host-local gates run before a job spends anything: secret resolvers and wait checks.

Both are operator scripts named by profile, resolved and probed at use time (realpath, regular file,
an execute bit), run with no shell, stdin closed, the worker's environment, and a timeout that sends
TERM and then KILL two seconds later. A resolver's stdout is the secret (one trailing newline
stripped, 64 KiB at most); a check's output is only counted. Nothing here logs or returns a path, a
reference or a value: refusals carry names and reasons only.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

from pi_dispatch.errors import PiDispatchError
from pi_dispatch.profiles import DEFAULT_SECRET_PROFILE
from pi_dispatch.reasons import ExitCode, Outcome, Reason, job_result
from pi_dispatch.waits import WaitDecision, decide_wait

MAX_SECRET_BYTES: Final = 65_536
# Each binding runs the resolver once, up to its timeout: more than this is never a real job's need.
MAX_SECRET_BINDINGS: Final = 64
MAX_REFERENCE_CHARS: Final = 1_024
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")


def is_argument(value: object, limit: int) -> bool:
    """Whether value may be handed to an operator's script as its one argument: a string that cannot read as an
    option, holds no control character (a NUL could not even be passed), and is not absurdly long."""
    return (
        isinstance(value, str)
        and 0 < len(value) <= limit
        and not value.startswith("-")
        and _CONTROL.search(value) is None
    )


KILL_GRACE_S: Final = 2.0
ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")

SecretFailure = Literal["exit", "empty", "nul", "overflow"]


class InfraRetry(PiDispatchError):
    """A failure worth another attempt (BullMQ retries it); carries a fixed reason, never output."""

    def __init__(self, reason: Reason) -> None:
        self.reason = reason
        super().__init__(reason)


@dataclass(frozen=True)
class Refusal:
    """A pre-spend refusal: returned, recorded, never retried."""

    reason: Reason
    profile: str | None = None

    def result(self) -> dict[str, object]:
        return job_result(Outcome.POLICY, self.reason)


def usable_script(path: str) -> Path | None:
    """The script's realpath when it is a regular file with an execute bit, else None."""
    try:
        real = Path(os.path.realpath(path))
        mode = real.stat().st_mode
    except OSError:
        return None
    return real if stat.S_ISREG(mode) and mode & 0o111 else None


async def _exit_code(process: asyncio.subprocess.Process, timeout_s: float) -> int:
    """The exit status once the process itself has exited, whoever still holds its pipes.

    `Process.wait()` on Python 3.11 also waits for the pipes to close, so a background grandchild
    holding stdout would turn a fast answer into a timeout; the returncode is set at exit.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while process.returncode is None:
        if loop.time() >= deadline:
            raise TimeoutError
        await asyncio.sleep(0.02)
    return process.returncode


def _signal_group(process: asyncio.subprocess.Process, signal_number: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal_number)


async def _stop(process: asyncio.subprocess.Process) -> None:
    """TERM the script's whole process group, then KILL it two seconds later."""
    _signal_group(process, signal.SIGTERM)
    try:
        await _exit_code(process, KILL_GRACE_S)
    except TimeoutError:
        _signal_group(process, signal.SIGKILL)
        with contextlib.suppress(TimeoutError):
            await _exit_code(process, KILL_GRACE_S)


def _release(process: asyncio.subprocess.Process) -> None:
    """Close our ends of the pipes once the answer is in; a leftover grandchild must not pin them open.

    asyncio's Process has no public close, and its transport otherwise outlives the event loop.
    """
    transport = getattr(process, "_transport", None)
    if transport is not None:
        transport.close()


async def _spawn(script: Path, argument: str, env: Mapping[str, str] | None) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        str(script),
        argument,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=dict(env) if env is not None else None,
        start_new_session=True,
    )


async def _read_capped(stream: asyncio.StreamReader, cap: int) -> tuple[bytes, bool]:
    """Up to cap bytes, and whether there was more."""
    data = bytearray()
    while chunk := await stream.read(16_384):
        data += chunk
        if len(data) > cap:
            return bytes(data[:cap]), True
    return bytes(data), False


async def _count(stream: asyncio.StreamReader) -> int:
    total = 0
    while chunk := await stream.read(65_536):
        total += len(chunk)
    return total


def _counted(task: asyncio.Future[int]) -> int:
    """The bytes a finished counting task saw; 0 when it was cut short or failed."""
    if not task.done() or task.cancelled() or task.exception() is not None:
        return 0
    return task.result()


@dataclass(frozen=True)
class Resolved:
    """A resolver's answer for one reference: a value, or why there is none."""

    value: str | None
    failure: SecretFailure | None = None
    stderr_bytes: int = 0


async def resolve_reference(
    script: Path, reference: str, timeout_s: float, env: Mapping[str, str] | None = None
) -> Resolved:
    """Run the resolver once for one reference. Raises InfraRetry for anything worth retrying."""
    try:
        process = await _spawn(script, reference, env)
    except OSError as error:
        raise InfraRetry(Reason.SECRET_RESOLVER_UNREACHABLE) from error
    assert process.stdout is not None and process.stderr is not None
    stderr = asyncio.ensure_future(_count(process.stderr))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s  # one bound for the whole run, reading and exiting alike
    try:
        output, overflow = await asyncio.wait_for(_read_capped(process.stdout, MAX_SECRET_BYTES), timeout_s)
        if overflow:
            await _stop(process)
            return Resolved(None, "overflow")
        code = await _exit_code(process, max(0.0, deadline - loop.time()))
    except TimeoutError as error:
        await _stop(process)
        raise InfraRetry(Reason.SECRET_RESOLVER_UNREACHABLE) from error
    finally:
        if not stderr.done():
            stderr.cancel()
        _release(process)
    stderr_bytes = _counted(stderr)
    if code == ExitCode.POLICY:
        return Resolved(None, "exit", stderr_bytes)
    if code != ExitCode.OK:
        raise InfraRetry(Reason.SECRET_RESOLVER_UNREACHABLE)
    text = output.decode("utf-8", "replace")
    if text.endswith("\r\n"):
        text = text[:-2]
    elif text.endswith("\n"):
        text = text[:-1]
    if text == "":
        return Resolved(None, "empty", stderr_bytes)
    if "\x00" in text:
        return Resolved(None, "nul", stderr_bytes)
    return Resolved(text, None, stderr_bytes)


@dataclass
class SecretsGate:
    """Resolves a job's `secrets` through its profile's resolver, or refuses the job by name."""

    profiles: Mapping[str, str]
    timeout_s: float = 10.0
    env: Mapping[str, str] | None = None
    reserved: frozenset[str] = field(default_factory=frozenset)

    @staticmethod
    def _binding(job: Mapping[str, object]) -> tuple[str, Mapping[object, object]] | None:
        """The profile a job binds and its name → reference map; None when it binds no secret."""
        profile = job.get("secretsProfile")
        secrets = job.get("secrets")
        bound = secrets if isinstance(secrets, Mapping) else {}
        if not (isinstance(profile, str) and profile) and not bound:
            return None
        return (profile if isinstance(profile, str) and profile else DEFAULT_SECRET_PROFILE), bound

    def refusal(self, job: Mapping[str, object]) -> Refusal | None:
        """The table lookups that refuse a job before anything runs: an undeclared profile, a reserved name."""
        binding = self._binding(job)
        if binding is None:
            return None
        name, bound = binding
        declared = self.profiles.get(name)
        if declared is None or usable_script(declared) is None:
            return Refusal(Reason.SECRET_PROFILE_UNKNOWN, name)
        if any(
            not isinstance(variable, str) or not ENV_NAME.fullmatch(variable) or variable in self.reserved
            for variable in bound
        ):
            return Refusal(Reason.SECRET_NAME_RESERVED, name)
        if len(bound) > MAX_SECRET_BINDINGS:
            return Refusal(Reason.SECRET_BINDINGS_TOO_MANY, name)
        if not all(is_argument(reference, MAX_REFERENCE_CHARS) for reference in bound.values()):
            return Refusal(Reason.SECRET_REFERENCE_INVALID, name)
        return None

    async def resolve(self, job: Mapping[str, object]) -> dict[str, str] | Refusal:
        """Env values for the job's secrets ({} when it binds none); Refusal; or InfraRetry raised."""
        binding = self._binding(job)
        if binding is None:
            return {}
        if refused := self.refusal(job):
            return refused
        name, bound = binding
        script = usable_script(self.profiles[name])
        if script is None:  # removed since the lookup
            return Refusal(Reason.SECRET_PROFILE_UNKNOWN, name)
        values: dict[str, str] = {}
        by_reference: dict[str, str] = {}
        for variable, reference in bound.items():
            if not isinstance(reference, str):
                return Refusal(Reason.SECRET_UNRESOLVED, name)
            if reference not in by_reference:
                answer = await resolve_reference(script, reference, self.timeout_s, self.env)
                if answer.value is None:
                    return Refusal(Reason.SECRET_UNRESOLVED, name)
                by_reference[reference] = answer.value
            values[str(variable)] = by_reference[reference]
        return values


async def run_wait_check(
    script: Path, target: object, timeout_s: float, env: Mapping[str, str] | None = None
) -> WaitDecision:
    """Run one wait check on the `<repo><sep><number>` target. Waits on process exit, not on the pipes."""
    if not isinstance(target, str) or target == "" or target.startswith("-"):
        return decide_wait(None, failed_to_start=True)
    try:
        process = await _spawn(script, target, env)
    except OSError:
        return decide_wait(None, failed_to_start=True)
    assert process.stdout is not None and process.stderr is not None
    drains = [asyncio.ensure_future(_count(process.stdout)), asyncio.ensure_future(_count(process.stderr))]
    try:
        code = await _exit_code(process, timeout_s)
    except TimeoutError:
        await _stop(process)
        return decide_wait(None, timed_out=True)
    except asyncio.CancelledError:
        await _stop(process)
        return decide_wait(None, aborted=True)
    finally:
        for drain in drains:
            drain.cancel()
        _release(process)
    return decide_wait(None, signalled=True) if code < 0 else decide_wait(code)
