"""Run records on this host's disk: the durable copy, written atomically before anything is mirrored.

Files are `<sanitized job id>.json` in PI_LOGS_DIR, the reference's name and shape: the job's latest attempt. A
record is written to a temporary file and renamed into place, so a reader or a crash never sees a torn record.
Every attempt's record is also appended, one JSON line each, to `<stem>.jsonl` beside it (a reader of the
reference's files never opens it), and each attempt's masked output to `<stem>.log`. The reaper deletes `.json`,
`.jsonl` and `.log` files older than the retention window, by mtime only.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any, Protocol

from pi_dispatch.core.jscompat import DAY_MS, js_json, js_json_parse
from pi_dispatch.core.names import record_stem
from pi_dispatch.core.reasons import Reason
from pi_dispatch.core.records import build_record
from pi_dispatch.infra.clock import wall_ms
from pi_dispatch.infra.durable import failure_name, write_atomically
from pi_dispatch.infra.events import EventLog, discard
from pi_dispatch.infra.valkey import STORE_FAULTS

ATTEMPTS_SUFFIX = ".jsonl"
REAPED_SUFFIXES = (".json", ATTEMPTS_SUFFIX, ".log")
UNMIRRORED_MAX = 10_000  # records kept for a mirror the store refused: on disk all the same, past this unmirrored


def record_path(logs_dir: Path, job_id: object) -> Path:
    """Where a job's record lives (`names.record_stem`: unique per id, bounded in length)."""
    return logs_dir / f"{record_stem(job_id)}.json"


def write_record(logs_dir: Path, record: Mapping[str, Any], log: EventLog = discard) -> Path | None:
    """Write the record durably, then add it to the job's attempts. Returns its path, or None after logging why."""
    line = (js_json(record) + "\n").encode("utf-8")
    try:
        target = record_path(logs_dir, record.get("jobId"))
        write_atomically(target, line)
    except OSError as error:
        log("run_record_failed", {"jobId": record_stem(record.get("jobId")), "reason": failure_name(error)})
        return None
    try:  # the record file is the record; the attempts beside it are its history, never retried twice
        append_line(target.with_suffix(ATTEMPTS_SUFFIX), line)
    except OSError as error:
        log("run_attempts_failed", {"jobId": record_stem(record.get("jobId")), "reason": failure_name(error)})
    return target


def append_line(target: Path, line: bytes) -> None:
    """One whole line at the end of a private file, durable once this returns (a torn last line is skipped)."""
    handle = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(handle, line)
        os.fsync(handle)
    finally:
        os.close(handle)


def read_attempt_records(logs_dir: Path, job_id: object) -> list[Any]:
    """This host's records of every attempt at a job, oldest first; unreadable lines are skipped."""
    try:
        lines = record_path(logs_dir, job_id).with_suffix(ATTEMPTS_SUFFIX).read_bytes().splitlines()
    except OSError:
        return []
    records = []
    for line in lines:
        with contextlib.suppress(ValueError):
            if isinstance(record := js_json_parse(line), dict):
                records.append(record)
    return records


def read_records_counted(logs_dir: Path, limit: int = 1_000) -> tuple[list[Any], int]:
    """The newest records on disk by mtime, parsed, and how many were skipped as unreadable (never fatal)."""
    try:
        entries = [entry for entry in os.scandir(logs_dir) if entry.name.endswith(".json") and entry.is_file()]
    except OSError:
        return [], 0
    entries.sort(key=lambda entry: entry.stat().st_mtime_ns, reverse=True)
    records: list[Any] = []
    skipped = 0
    for entry in entries[:limit]:
        try:
            record = js_json_parse(Path(entry.path).read_bytes())
        except (OSError, ValueError):
            record = None
        if isinstance(record, dict):
            records.append(record)
        else:
            skipped += 1
    return records, skipped


def read_records(logs_dir: Path, limit: int = 1_000) -> list[Any]:
    """The newest records on disk by mtime, parsed; unreadable files are skipped, never fatal."""
    return read_records_counted(logs_dir, limit)[0]


def reap_logs(logs_dir: Path, retention_days: int, *, now: Callable[[], int] = wall_ms, log: EventLog = discard) -> int:
    """Delete `.json`/`.jsonl`/`.log` files older than the retention window; 0 days keeps everything."""
    if retention_days == 0:
        return 0
    cutoff_ns = (now() - retention_days * DAY_MS) * 1_000_000
    removed = 0
    try:
        entries = list(os.scandir(logs_dir))
    except OSError as error:
        log("log_reaper_skipped", {"reason": type(error).__name__})
        return 0
    for entry in entries:
        if not entry.name.endswith(REAPED_SUFFIXES):
            continue
        try:
            if entry.is_file(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_mtime_ns < cutoff_ns:
                Path(entry.path).unlink()
                removed += 1
                log("reaped_log", {"file": entry.name})
        except OSError as error:
            log("log_reaper_skipped", {"file": entry.name, "reason": type(error).__name__})
    return removed


class Mirror(Protocol):
    """What the recorder needs of the fleet mirror."""

    async def mirror(self, record: Mapping[str, Any] | None, sanitized_job_id: str) -> bool: ...


class Attempts(Protocol):
    """What the recorder needs of the store's attempt history (`fleet/jobhistory.py`)."""

    async def remember(self, record: Mapping[str, Any], stem: str) -> bool: ...

    async def spill(self, host: str, stem: str, record: Mapping[str, Any]) -> bool: ...

    async def unspill(self, host: str, stem: str) -> bool: ...

    async def spilled(self, host: str) -> dict[str, Mapping[str, Any]]: ...


def attempt_record(
    facts: Mapping[str, Any],
    data: Mapping[str, Any],
    result: Mapping[str, Any] | None,
    error: Mapping[str, Any] | None,
    log: EventLog,
) -> dict[str, Any]:
    """An attempt's record. Should the job's own fields break the builder, the attempt is recorded without them: a
    record is never lost to the data it describes."""
    try:
        return build_record(data=data, result=result, error=error, **facts)
    except Exception as failure:  # broad: a bug in the face of hostile data; the run still gets its record
        log("run_record_degraded", {"jobId": facts["job_id"], "error": type(failure).__name__})
        return build_record(data={}, result=None, error={"reason": Reason.INFRA}, **facts)


class RunRecorder:
    """Record a finished run: the file first, durably; then, without waiting, the fleet mirror (kept and mirrored
    again each beat while the store refuses it, as a full store does).

    The order is the point: the fleet never shows a run whose file does not exist. A record that cannot be
    written (disk full, read-only) is logged with why and kept, in memory and in the store (`runs:spill:<host>`,
    so a stop does not lose it), and `retry` (each beat) writes it, then mirrors it, once the disk takes it again;
    `recover` at boot takes back what an earlier run of the worker could not write. While any record is unwritten
    the worker takes no new work (`blocked`). The mirror is only given when this host declared a worker name.
    """

    def __init__(
        self,
        logs_dir: Path,
        mirror: Mirror | None,
        log: EventLog = discard,
        attempts: Attempts | None = None,
        host: str = "",
    ) -> None:
        self.logs_dir = logs_dir
        self.mirror = mirror
        self.attempts = attempts
        self.log = log
        self.host = host
        self._in_flight: set[asyncio.Task[bool]] = set()
        self.unwritten: dict[str, Mapping[str, Any]] = {}  # record stem -> the latest record not yet on disk
        self.unmirrored: dict[str, Mapping[str, Any]] = {}  # record stem -> a record on disk the store refused
        self._remirroring = False

    @property
    def blocked(self) -> bool:
        """Whether a run's record is still waiting for the disk: no new work is taken until it is written."""
        return bool(self.unwritten)

    def record(self, record: Mapping[str, Any]) -> Path | None:
        """Write the record file, then start mirroring it; returns the file's path (None: kept for a retry)."""
        stem = record_stem(record.get("jobId"))
        path = write_record(self.logs_dir, record, self.log)
        spill = self.attempts if self.host else None
        if path is None:
            self.unwritten[stem] = record
            if spill is not None:
                self._start(spill.spill(self.host, stem, record))
            return None
        if self.unwritten.pop(stem, None) is not None and spill is not None:
            self._start(spill.unspill(self.host, stem))
        if self.mirror is not None:
            self._start(self._mirrored(record, stem))
        if self.attempts is not None:
            self._start(self.attempts.remember(record, stem))
        return path

    async def _mirrored(self, record: Mapping[str, Any], stem: str) -> bool:
        """Mirror a record; one the store refused (full, or away) is kept for `remirror`, up to UNMIRRORED_MAX."""
        assert self.mirror is not None
        if await self.mirror.mirror(record, stem):
            self.unmirrored.pop(stem, None)
            return True
        if stem in self.unmirrored or len(self.unmirrored) < UNMIRRORED_MAX:
            self.unmirrored[stem] = record
        return False

    def remirror(self) -> None:
        """Each beat: mirror again what the store refused, so the fleet shows every run once it takes writes; one
        pass at a time, in order, ending at the first refusal (a store still away costs one try a beat)."""
        if self.unmirrored and not self._remirroring:
            self._remirroring = True
            self._start(self._remirror_all())

    async def _remirror_all(self) -> bool:
        try:
            for stem, record in list(self.unmirrored.items()):
                if not await self._mirrored(record, stem):
                    return False
            return True
        finally:
            self._remirroring = False

    async def recover(self) -> int:
        """At boot: take back the records an earlier run of this worker could not write, and write what the disk
        now takes; returns how many are still unwritten."""
        if self.attempts is None or not self.host:
            return 0
        try:
            kept = await self.attempts.spilled(self.host)
        except STORE_FAULTS as error:  # the store away: what it keeps is read at the next boot
            self.log("run_records_unrecovered", {"reason": failure_name(error)})
            return len(self.unwritten)
        for stem, record in kept.items():
            self.unwritten.setdefault(stem, record)
        if kept:
            self.log("run_records_recovered", {"count": len(kept)})
        return self.retry()

    def _start(self, write: Coroutine[Any, Any, bool]) -> None:
        task = asyncio.ensure_future(write)
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)

    def retry(self) -> int:
        """Write (then mirror) the records the disk refused before; returns how many are still unwritten."""
        for record in list(self.unwritten.values()):
            if self.record(record) is not None:
                self.log("run_record_written_late", {"jobId": record_stem(record.get("jobId"))})
        return len(self.unwritten)

    async def settle(self) -> None:
        """Wait for mirrors still in flight (each is bounded), e.g. before shutdown."""
        if self._in_flight:
            await asyncio.gather(*self._in_flight, return_exceptions=True)
