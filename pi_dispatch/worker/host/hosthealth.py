"""Whether this host can run jobs at all. A cause on the host's side (its jobs or logs folder not writable, the job
image gone, the Docker daemon refusing, the egress proxy down) is not the job's fault: the job goes back to its queue
without spending an attempt, and the host is marked unhealthy. While it is, its row says so and why (`unhealthy`: a
reason naming the setting and the errno, never a path), routers and stealing leave it out, it takes no job, what
waits on its own queue moves to capable peers as a drain's does, and each beat it probes the causes again; it takes
work again once none is left (`host_healthy`).
"""

from __future__ import annotations

import asyncio
import errno
import os
import tempfile
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pi_dispatch.infra.events import EventLog, discard

if TYPE_CHECKING:
    from pi_dispatch.worker.gates.egressgate import EgressGate
    from pi_dispatch.worker.run.containers import ContainerRuntime


def unwritable(setting: str, error: OSError) -> str:
    """The reason a folder setting fails: the variable and the errno's name (the log and the row hold no path)."""
    code = errno.errorcode.get(error.errno or 0, type(error).__name__)
    return f"{setting} is not writable ({code})"


def _probe_folder(folder: Path) -> None:
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(dir=folder, prefix=".probe-")
    try:
        os.write(handle, b"probe")
        os.fsync(handle)
    finally:
        os.close(handle)
        Path(name).unlink()


@dataclass
class HostHealth:
    """The host's own fitness to run jobs: `fault` marks it unhealthy, `probe` (each beat) clears it once no cause
    is left."""

    jobs_dir: Path
    logs_dir: Path
    image: str
    runtime: ContainerRuntime
    log: EventLog = discard
    changed: Callable[[], Awaitable[object]] | None = None  # the row written again at once (routers see it)
    egress: EgressGate | None = None  # PI_EGRESS on: the proxy must answer too
    runtime_fault: str | None = None  # PI_JOB_RUNTIME failed its boot canary: till the worker's next start
    reason: str | None = None
    _telling: set[asyncio.Future[object]] = field(default_factory=set, repr=False)

    @property
    def unhealthy(self) -> bool:
        return self.reason is not None

    def fault(self, reason: str) -> None:
        fresh = self.reason is None
        self.reason = reason
        if fresh:
            self.log("host_unhealthy", {"reason": reason})
            self._tell()

    def _tell(self) -> None:
        if self.changed is not None:
            told = asyncio.ensure_future(self.changed())
            self._telling.add(told)
            told.add_done_callback(self._telling.discard)

    async def cause(self) -> str | None:
        """The first cause on this host's side that would fail a job now, or None."""
        if self.runtime_fault is not None:
            return self.runtime_fault
        for setting, folder in (("PI_JOBS_DIR", self.jobs_dir), ("PI_LOGS_DIR", self.logs_dir)):
            try:
                await asyncio.to_thread(_probe_folder, folder)
            except OSError as error:
                return unwritable(setting, error)
        if not await self.runtime.ping():
            return "the Docker daemon does not answer"
        if await self.runtime.image_id(self.image) is None:
            return "PI_JOB_IMAGE is not on this host"
        return await self.egress.fault() if self.egress is not None else None

    async def probe(self) -> None:
        """Each beat while unhealthy: healthy again once no cause is left."""
        if self.reason is None:
            return
        cause = await self.cause()
        if cause is None:
            self.log("host_healthy", {"was": self.reason})
            self.reason = None
            self._tell()
        else:
            self.reason = cause

    def row_facts(self) -> Mapping[str, str]:
        """The row's `unhealthy` (this port's own field): why, or empty."""
        return {"unhealthy": self.reason or ""}
