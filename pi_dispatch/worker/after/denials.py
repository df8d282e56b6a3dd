"""Every refusal of the egress proxy, attached to the attempt it refused (the reference records none).

squid writes each refusal as a line of its refusal log (`infra/squid.DENIED_FORMAT`: when, the client's address, the
method, host and port). A job's container has its own address on the egress network, read once it has started (a
job cannot choose another: its capabilities are dropped); the worker reads the log's new lines when an attempt ends
and gives each line to the job whose address it names: the attempt's record keeps the first `KEPT` (and how many in
all), its output gets one line each, its log an `egress_refused` event (which the metrics count by the job's
secret profile). The lines are hostile text (a job chooses the host it asks for): one out of shape is left out. A
line whose address is no running job's yet (read before its container's address was) waits a while for it, then is
counted as nobody's.
"""

from __future__ import annotations

import asyncio
import os
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

from pi_dispatch.core.egress import Denied, parse_denied
from pi_dispatch.core.jscompat import iso_string
from pi_dispatch.infra.clock import wall_ms
from pi_dispatch.infra.events import EventLog, discard

if TYPE_CHECKING:
    from pi_dispatch.worker.run.output import AttemptOutput

KEPT: Final = 20  # refusals one attempt's record lists; the count says how many there were
UNCLAIMED_KEPT: Final = 256  # lines waiting for their job's address, at most
UNCLAIMED_MS: Final = 60_000  # how long such a line waits before it is nobody's
READ_MAX: Final = 1 << 20  # bytes read in one go; the rest on the next read
SETTLE_S: Final = 0.2  # how long after its container's end an attempt's last refusals may still be written
# How much earlier than Docker's StartedAt a container's first request may be: a loaded daemon records the start
# after the process has begun. Lines that early are the job's only when nobody else can have held the address then.
START_SLACK_MS: Final = 2_000


@dataclass
class Refusals:
    """One attempt's refusals: the first `KEPT`, and how many in all."""

    kept: list[Denied] = field(default_factory=list)
    count: int = 0

    def add(self, denied: Denied) -> None:
        self.count += 1
        if len(self.kept) < KEPT:
            self.kept.append(denied)

    def as_record(self) -> dict[str, object]:
        """The record's `egressRefused`: how many, and the first `KEPT`."""
        first = [
            {"host": one.host, "port": one.port, "method": one.method, "at": iso_string(one.at_ms)} for one in self.kept
        ]
        return {"count": self.count, "first": first}


@dataclass
class DenialLog:
    """This host's refusal log, read from where the last read stopped (from its end, for a log older than the
    worker; from its start again, once the proxy has made it anew)."""

    path: Path
    _identity: tuple[int, int] | None = None
    _offset: int = 0
    _partial: bytes = b""

    def start(self) -> None:
        """Read nothing older than now."""
        try:
            found = self.path.stat()
        except OSError:
            return
        self._identity, self._offset = (found.st_dev, found.st_ino), found.st_size

    def new_lines(self) -> list[str]:
        """The complete lines written since the last read (blocking: run it off the loop)."""
        try:
            with self.path.open("rb") as handle:
                found = os.fstat(handle.fileno())
                if (found.st_dev, found.st_ino) != self._identity or found.st_size < self._offset:
                    self._identity, self._offset, self._partial = (found.st_dev, found.st_ino), 0, b""
                handle.seek(self._offset)
                data = handle.read(READ_MAX)
        except OSError:
            return []  # no proxy yet, or not readable by this user: nothing to attach
        self._offset += len(data)
        *lines, self._partial = (self._partial + data).split(b"\n")
        return [line.decode("utf-8", "replace") for line in lines]


@dataclass
class DenialWatch:
    """The refusals of this host's running attempts, by their containers' addresses."""

    log_file: DenialLog
    # a started container's address on its network, and when its process started (epoch ms, None: unknown)
    address: Callable[[str], Awaitable[tuple[str, int | None] | None]]
    now_ms: Callable[[], int] = wall_ms
    log: EventLog = discard
    _jobs: dict[str, tuple[str, int]] = field(default_factory=dict)  # address -> job id, since when (epoch ms)
    _profiles: dict[str, str] = field(default_factory=dict)  # job id -> its secret profile ("" for none)
    _found: dict[str, Refusals] = field(default_factory=dict)  # job id -> its refusals so far
    _unclaimed: deque[Denied] = field(default_factory=lambda: deque(maxlen=UNCLAIMED_KEPT))
    _freed: dict[str, int] = field(default_factory=dict)  # address -> when its last job here let it go (epoch ms)

    def __post_init__(self) -> None:
        self._booted = self.now_ms()  # an address no job here held since is nobody's before this

    def started(self, job_id: str, profile: str) -> Callable[[str], Awaitable[None]]:
        """What the container runtime tells once the job's container has started: its address is then watched."""

        async def watch_container(container_id: str) -> None:
            returned = self.now_ms()  # its start has returned: Docker gave it the address after its last holder ended
            if (found := await self.address(container_id)) is None:  # its refusals will be nobody's: said once
                self.log("egress_watch_unavailable", {"jobId": job_id})
                return
            # from when its process started, as Docker says (its first request may come before this loop hears
            # that the start returned); never later than that
            address, started = found
            self.watch(job_id, address, profile, min(started, returned) if started is not None else returned)

        return watch_container

    def watch(self, job_id: str, address: str, profile: str, since: int) -> None:
        """The job's container has had this address since `since` (epoch ms, squid's clock, this host's): the
        refusals naming it from then are its own, those read already included. A line from before is an earlier
        holder's (Docker gives a freed address again), never this job's."""
        held_by_another = address in self._jobs and self._jobs[address][0] != job_id  # its old job not ended yet
        floor = since if held_by_another else self._freed.get(address, self._booted)
        since = min(since, max(floor, since - START_SLACK_MS))
        self._jobs[address], self._profiles[job_id] = (job_id, since), profile
        self._found.setdefault(job_id, Refusals())
        for one in [one for one in self._unclaimed if one.client == address and one.at_ms >= since]:
            self._unclaimed.remove(one)
            self._claimed(job_id, one)

    async def ended(self, job_id: str, output: AttemptOutput | None) -> Refusals:
        """The attempt's refusals, the log read to its end first, each a line of its output; the job's address is
        free again after."""
        addresses = [address for address, (owner, _) in self._jobs.items() if owner == job_id]
        if addresses:  # squid writes a refusal's line just after its answer: one a starved proxy is still writing
            await asyncio.sleep(SETTLE_S)
        await self.read()
        for address in addresses:  # unless Docker gave it to a job started meanwhile: that job's watch stays
            if self._jobs.get(address, (None, 0))[0] == job_id:
                del self._jobs[address]
                self._freed[address] = self.now_ms()
        self._profiles.pop(job_id, None)
        refusals = self._found.pop(job_id, Refusals())
        if output is not None:
            for one in refusals.kept:
                output.write(
                    f"egress proxy refused {one.method} {one.host}:{one.port} (not in the allowlist)\n".encode()
                )
            if refusals.count > len(refusals.kept):
                output.write(f"egress proxy refused {refusals.count - len(refusals.kept)} more\n".encode())
        return refusals

    async def read(self) -> None:
        lines = await asyncio.to_thread(self.log_file.new_lines)
        oldest = self.now_ms() - UNCLAIMED_MS
        while self._unclaimed and self._unclaimed[0].at_ms < oldest:
            self._told(None, self._unclaimed.popleft())
        for line in lines:
            denied = parse_denied(line)
            if denied is None:
                continue
            owner, since = self._jobs.get(denied.client, (None, 0))
            if owner is None:
                self._unclaimed.append(denied)
            elif denied.at_ms >= since:  # an earlier line names an address an ended job had: not this job's
                self._claimed(owner, denied)

    def _claimed(self, job_id: str, denied: Denied) -> None:
        self._found[job_id].add(denied)
        self._told(job_id, denied)

    def _told(self, job_id: str | None, denied: Denied) -> None:
        fields = {"jobId": job_id, "profile": self._profiles.get(job_id or "", ""), "method": denied.method}
        self.log("egress_refused", {**fields, "host": denied.host, "port": denied.port})
