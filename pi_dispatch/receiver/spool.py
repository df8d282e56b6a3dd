"""The receiver's spool: a verified delivery the store cannot take now is kept on the receiver's own disk, and
answered 202, instead of being answered 503 and lost (GitHub, for one, does not redeliver a failed delivery).

One file per delivery, named by a sequence number so the spool drains in the order deliveries came; each is written
to a temporary name, fsynced, renamed and its directory fsynced before the forge hears 202, so a crash or a power
cut after the answer keeps it. The spool is bounded (PI_RECEIVER_SPOOL_MAX_MB): a full spool answers 503, the one
case left where the forge must redeliver. A delivery id already waiting in the spool is not written twice; the
job ids are deterministic, so an entry replayed after its job was queued (a crash between the add and the unlink)
is deduplicated by the store. The files hold the job's data, as the store does: mode 0600 in a private directory.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pi_dispatch.infra.events import EventLog

FORMAT: Final = 1
SUFFIX: Final = ".json"
SET_ASIDE: Final = "set-aside"  # entries that cannot be read, or that a live store refuses: kept, never replayed
MB: Final = 1_048_576


class SpoolFull(Exception):
    """The spool holds its bound: the delivery is not kept, and the forge is answered 503."""


@dataclass(frozen=True)
class Entry:
    """One spooled delivery: what the receiver would have enqueued, and where it waits."""

    path: Path
    sequence: int
    delivery: str
    kind: str
    job: dict[str, Any]
    size: int
    at_ms: int  # when it was spooled, by the receiver's clock


def _digest(kind: str, delivery: str) -> str:
    return hashlib.sha256(f"{kind}\0{delivery}".encode()).hexdigest()[:16]


def _fsync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _parsed(path: Path) -> Entry:
    """An entry from its file; ValueError (or OSError) when it is not one this receiver wrote."""
    sequence = int(path.name.split("-", 1)[0])
    raw = path.read_bytes()
    record = json.loads(raw)
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise ValueError("not a spool entry")
    kind, delivery, job, at = (record.get(name) for name in ("kind", "delivery", "job", "at"))
    if not (isinstance(kind, str) and isinstance(delivery, str) and isinstance(job, dict) and isinstance(at, int)):
        raise ValueError("not a spool entry")
    return Entry(path, sequence, delivery, kind, job, len(raw), at)


class Spool:
    """The spool directory and what it holds, in order. Not shared: one receiver per directory."""

    def __init__(self, directory: Path, max_bytes: int, log: EventLog, clock: Callable[[], float] = time.time):
        self.directory = directory
        self.max_bytes = max_bytes
        self._log = log
        self._clock = clock
        self._entries: list[Entry] = []
        self._waiting: set[str] = set()  # kind and delivery id of each entry, to keep a redelivery once
        self._next = 1
        self.bytes = 0

    @property
    def depth(self) -> int:
        return len(self._entries)

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    def load(self) -> Spool:
        """Read what a previous run left, in order; an entry that cannot be read is set aside and logged. A spool
        that cannot be written is said at boot (`spool_unwritable`), not found out during the outage it is for."""
        refused = self.probe()
        if refused:
            self._log("spool_unwritable", {"setting": "PI_RECEIVER_SPOOL_DIR", "errno": refused})
        if not self.directory.is_dir():
            return self
        for path in sorted(self.directory.glob(f"*{SUFFIX}")):
            try:
                entry = _parsed(path)
            except (OSError, ValueError) as error:
                self.set_aside(path, type(error).__name__)
                continue
            self._keep(entry)
        for stray in self.directory.glob(".*.tmp"):  # a write cut short: it was never answered 202
            with contextlib.suppress(OSError):
                stray.unlink()
        if self._entries:
            self._log("spool_loaded", {"entries": self.depth, "bytes": self.bytes})
        return self

    def probe(self) -> str | None:
        """None when the spool can be written now (or is off); else the errno's name."""
        if not self.enabled:
            return None
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            probe = self.directory / ".probe.tmp"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as error:
            return errno.errorcode.get(error.errno or 0, type(error).__name__)
        return None

    def _keep(self, entry: Entry) -> None:
        self._entries.append(entry)
        self._waiting.add(_digest(entry.kind, entry.delivery))
        self.bytes += entry.size
        self._next = max(self._next, entry.sequence + 1)

    def holds(self, kind: str, delivery: str) -> bool:
        return bool(delivery) and _digest(kind, delivery) in self._waiting

    def put(self, kind: str, job: Mapping[str, Any], delivery: str) -> Entry | None:
        """Keep a delivery durably (fsynced) and return its entry; None when it already waits here. Raises SpoolFull
        past the bound, OSError when the disk refuses."""
        if self.holds(kind, delivery):
            return None
        at_ms = int(self._clock() * 1000)
        body = json.dumps(
            {"format": FORMAT, "kind": kind, "delivery": delivery, "at": at_ms, "job": job},
            separators=(",", ":"),
            ensure_ascii=False,
        ).encode()
        if self.bytes + len(body) > self.max_bytes:
            raise SpoolFull(f"{self.bytes} of {self.max_bytes} bytes held")
        sequence = self._next
        self._next += 1
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        name = f"{sequence:016d}-{_digest(kind, delivery) if delivery else 'x' * 16}{SUFFIX}"
        path, temporary = self.directory / name, self.directory / f".{name}.tmp"
        try:
            descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                unwritten = memoryview(body)
                while unwritten:
                    unwritten = unwritten[os.write(descriptor, unwritten) :]
                os.fsync(descriptor)
            finally:
                os.close(descriptor)
            temporary.rename(path)
            _fsync_directory(self.directory)
        except OSError:
            with contextlib.suppress(OSError):
                temporary.unlink()
            raise
        entry = Entry(path, sequence, delivery, kind, dict(job), len(body), at_ms)
        self._keep(entry)
        return entry

    def oldest(self) -> Entry | None:
        return self._entries[0] if self._entries else None

    def __iter__(self) -> Iterator[Entry]:
        return iter(list(self._entries))

    def _forget(self, entry: Entry) -> None:
        self._entries.remove(entry)
        self._waiting.discard(_digest(entry.kind, entry.delivery))
        self.bytes -= entry.size

    def done(self, entry: Entry) -> None:
        """The entry's jobs are on the store: remove it for good (forgotten first, so an OSError from the disk
        leaves at most a file that a later boot replays, and the store deduplicates)."""
        self._forget(entry)
        with contextlib.suppress(FileNotFoundError):
            entry.path.unlink()
        _fsync_directory(self.directory)

    def set_aside(self, path: Path, reason: str, entry: Entry | None = None) -> None:
        """Move a file out of the replay, into set-aside/, where an operator can read it; logged by name only."""
        if entry is not None:
            self._forget(entry)
        aside = self.directory / SET_ASIDE
        try:
            aside.mkdir(mode=0o700, exist_ok=True)
            path.rename(aside / path.name)
        except OSError as error:
            reason = f"{reason}; not moved: {error.strerror}"
        self._log("spool_entry_set_aside", {"entry": path.name, "reason": reason})
