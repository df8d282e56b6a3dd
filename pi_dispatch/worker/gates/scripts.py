"""The host's operator scripts, run before a job spends anything: secret resolvers and wait checks.

Both are scripts named by profile, resolved and probed at use time (realpath, regular file,
an execute bit), run with no shell, stdin closed, a closed environment (`script_environment`: the host's basics
and the variables PI_SCRIPT_ENV names, never the store's credentials), and a timeout that sends TERM and then KILL
two seconds later. A resolver's output is read by `secrets.py`; a check's
output is only counted. Nothing here logs or returns a path, a
reference or a value: refusals carry names and reasons only.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from pi_dispatch.core.errors import PiDispatchError
from pi_dispatch.core.reasons import Outcome, Reason, job_result
from pi_dispatch.core.waits import WaitDecision, decide_wait

_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")
# What every script gets of the worker's environment: where programs are, a home, the locale and the zone.
SCRIPT_BASICS: Final = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "USER", "LOGNAME")
DEFAULT_PATH: Final = "/usr/local/bin:/usr/bin:/bin"
# The store's credentials: never handed to a script, even when PI_SCRIPT_ENV names them.
STORE_PREFIX: Final = "VALKEY_"


def script_environment(passed: Iterable[str] = (), source: Mapping[str, str] | None = None) -> dict[str, str]:
    """A resolver's or wait check's environment: the basics and the `passed` names the worker has, nothing else
    (the worker's own environment holds the store's password, the forge's tokens and the provider's keys)."""
    found = os.environ if source is None else source
    names = [*SCRIPT_BASICS, *(name for name in passed if not name.startswith(STORE_PREFIX))]
    closed = {name: found[name] for name in names if name in found}
    closed.setdefault("PATH", DEFAULT_PATH)
    return closed


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
    words: Mapping[str, str] = field(default_factory=dict)  # what the forge's comment names (a window, a cap)

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


async def exit_code(process: asyncio.subprocess.Process, timeout_s: float) -> int:
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


def signal_group(process: asyncio.subprocess.Process, signal_number: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal_number)


async def stop(process: asyncio.subprocess.Process) -> None:
    """TERM the script's whole process group, then KILL it two seconds later."""
    signal_group(process, signal.SIGTERM)
    try:
        await exit_code(process, KILL_GRACE_S)
    except TimeoutError:
        signal_group(process, signal.SIGKILL)
        with contextlib.suppress(TimeoutError):
            await exit_code(process, KILL_GRACE_S)


def release(process: asyncio.subprocess.Process) -> None:
    """Close our ends of the pipes once the answer is in; a leftover grandchild must not pin them open.

    asyncio's Process has no public close, and its transport otherwise outlives the event loop.
    """
    transport = getattr(process, "_transport", None)
    if transport is not None:
        transport.close()


async def spawn(script: Path, argument: str, env: Mapping[str, str] | None) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        str(script),
        argument,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=dict(env) if env is not None else script_environment(),
        start_new_session=True,
    )


async def read_capped(stream: asyncio.StreamReader, cap: int) -> tuple[bytes, bool]:
    """Up to cap bytes, and whether there was more."""
    data = bytearray()
    while chunk := await stream.read(16_384):
        data += chunk
        if len(data) > cap:
            return bytes(data[:cap]), True
    return bytes(data), False


async def count(stream: asyncio.StreamReader) -> int:
    total = 0
    while chunk := await stream.read(65_536):
        total += len(chunk)
    return total


def counted(task: asyncio.Future[int]) -> int:
    """The bytes a finished counting task saw; 0 when it was cut short or failed."""
    if not task.done() or task.cancelled() or task.exception() is not None:
        return 0
    return task.result()


async def run_wait_check(
    script: Path, target: object, timeout_s: float, env: Mapping[str, str] | None = None
) -> WaitDecision:
    """Run one wait check on the `<repo><sep><number>` target. Waits on process exit, not on the pipes."""
    if not isinstance(target, str) or target == "" or target.startswith("-"):
        return decide_wait(None, failed_to_start=True)
    try:
        process = await spawn(script, target, env)
    except OSError:
        return decide_wait(None, failed_to_start=True)
    except asyncio.CancelledError:  # aborted while it started (a loaded host starts slowly): asyncio killed it
        return decide_wait(None, aborted=True)
    assert process.stdout is not None and process.stderr is not None
    drains = [asyncio.ensure_future(count(process.stdout)), asyncio.ensure_future(count(process.stderr))]
    try:
        code = await exit_code(process, timeout_s)
    except TimeoutError:
        await stop(process)
        return decide_wait(None, timed_out=True)
    except asyncio.CancelledError:
        await stop(process)
        return decide_wait(None, aborted=True)
    finally:
        for drain in drains:
            drain.cancel()
        release(process)
    return decide_wait(None, signalled=True) if code < 0 else decide_wait(code)
