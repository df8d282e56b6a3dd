"""A job's output, as it runs: masked, kept in full on this host beside its record, and copied to the store.

Every secret the job was given is replaced by `***` before a byte is written anywhere, in its plain form, each of
its lines, and its base64 and URL-encoded forms (what GitHub masks). Output arrives in chunks that may split a
secret, so the tail that could still be the start of one is held back until the next chunk says. The host file
(`<stem>.log`, mode 0600) gets every attempt one after the other, each under a header line; the store gets each
attempt as a capped stream (`fleet/joblogs.py`). Past either cap the output is counted, not kept, and a marker
line says how much was dropped.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final
from urllib.parse import quote, quote_plus

from pi_dispatch.core.jscompat import iso_string
from pi_dispatch.core.names import record_stem
from pi_dispatch.fleet.jobhistory import JobHistory
from pi_dispatch.infra.clock import wall_ms
from pi_dispatch.infra.durable import failure_name
from pi_dispatch.infra.events import EventLog, discard

MASK: Final = b"***"
# A line of a multi-line secret is masked on its own once it is this long (shorter ones are words, not secrets).
MIN_SECRET_LINE: Final = 4
HEADER_PREFIX: Final = b"#pi-dispatch "
ATTEMPT_HEADER: Final = HEADER_PREFIX + b"attempt="  # each attempt's part of <stem>.log starts so (job lines: a time)
PUMP_INTERVAL_S: Final = 0.25
LONG_LINE: Final = 64 * 1024  # a line without its end yet is masked and shown once it is this long


def secret_forms(values: Iterable[str]) -> set[bytes]:
    """Every form of the values that output may show: as given, line by line, base64 (both alphabets, with and
    without padding) and URL-encoded."""
    forms: set[bytes] = set()
    for value in values:
        if not value:
            continue
        raw = value.encode("utf-8", "surrogatepass")
        lines = raw.splitlines()
        if len(lines) == 1:
            forms.add(lines[0])
        else:  # output is masked a line at a time, so a secret of many lines is masked line by line
            forms.update(line for line in lines if len(line.strip()) >= MIN_SECRET_LINE)
        for encoded in (base64.b64encode(raw), base64.urlsafe_b64encode(raw)):
            forms.update({encoded, encoded.rstrip(b"=")})
        forms.update({quote(value, safe="").encode(), quote_plus(value).encode()})
    return {form for form in forms if form}


class Masker:
    """Masks a stream fed in chunks; `flush` masks what is held back once the stream ends."""

    def __init__(self, secrets: Iterable[str]) -> None:
        forms = sorted(secret_forms(secrets), key=len, reverse=True)  # the longest form wins where forms overlap
        self._forms = forms
        self._pattern = re.compile(b"|".join(re.escape(form) for form in forms)) if forms else None
        self._hold = max((len(form) for form in forms), default=1) - 1
        self._carry = b""

    def feed(self, chunk: bytes) -> bytes:
        """What of the stream so far can be shown: every whole line, masked. A line's unfinished tail waits for
        the rest of it (Docker sends whole lines, so it rarely waits), unless it grows past LONG_LINE."""
        if self._pattern is None:
            return chunk
        buffer = self._carry + chunk
        cut = buffer.rfind(b"\n") + 1
        if len(buffer) - cut > LONG_LINE:  # no form holds a newline, so only a form's own length must wait
            cut = len(buffer) - self._hold
        if not any(form in buffer for form in self._forms):  # the common case, at memchr speed: nothing to mask
            self._carry = buffer[cut:]
            return buffer[:cut]
        out, position = bytearray(), 0
        for found in self._pattern.finditer(buffer):
            if found.start() >= cut:
                break
            out += buffer[position : found.start()] + MASK
            position = found.end()
        end = max(cut, position)
        out += buffer[position:end]
        self._carry = buffer[end:]
        return bytes(out)

    def flush(self) -> bytes:
        rest, self._carry = self._carry, b""
        return rest if self._pattern is None else self._pattern.sub(MASK, rest)


@dataclass
class Capped:
    """A byte budget: what fits is taken, the rest only counted."""

    limit: int
    taken: int = 0
    dropped: int = 0

    def take(self, data: bytes) -> bytes:
        room = max(0, self.limit - self.taken)
        kept = data[:room]
        self.taken += len(kept)
        self.dropped += len(data) - len(kept)
        return kept


def dropped_marker(dropped: int, limit: int, where: str, setting: str) -> bytes:
    return (
        f"{HEADER_PREFIX.decode()}dropped={dropped} bytes of output past the {where}'s cap of {limit} bytes "
        f"({setting})\n"
    ).encode()


@dataclass
class AttemptOutput:
    """One attempt's output sink. `write` is called from the thread that follows the container's log (so file
    writes never block the event loop); `pending` hands what the store copy has not taken yet to the loop."""

    path: Path
    header: str
    masker: Masker
    file_cap: Capped
    store_cap: Capped | None  # None: this host keeps no store copy
    _pending: bytearray = field(default_factory=bytearray)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    clock: Callable[[], str] = lambda: iso_string(wall_ms())
    _handle: int | None = None
    _at_line_start: bool = True
    total: int = 0
    file_error: str | None = None  # why the host file stopped taking output, if it did

    def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._handle = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._file(f"{HEADER_PREFIX.decode()}{self.header}\n".encode())

    def write(self, chunk: bytes) -> None:
        """Output as it arrived, each line stamped with the time it arrived, masked, kept."""
        self.total += len(chunk)
        self._keep(self.masker.feed(self._stamped(chunk)))

    def _stamped(self, chunk: bytes) -> bytes:
        # One stamp for what arrived together, put before each line that starts in it: a C-level replace a chunk,
        # never a Python step a line (a job may print hundreds of thousands).
        stamp = self.clock().encode() + b" "
        text = chunk.replace(b"\n", b"\n" + stamp)
        if self._at_line_start:
            text = stamp + text
        if text.endswith(b"\n" + stamp):
            text = text[: -len(stamp)]
        self._at_line_start = chunk.endswith(b"\n")
        return text

    def close(self) -> None:
        """The held-back tail, then the markers for whatever a cap dropped, then the file is closed."""
        self._keep(self.masker.flush())
        if self.file_cap.dropped:
            self._file(dropped_marker(self.file_cap.dropped, self.file_cap.limit, "host", "PI_JOB_LOG_MB"))
        if self.store_cap is not None and self.store_cap.dropped:
            marker = dropped_marker(self.store_cap.dropped, self.store_cap.limit, "store", "PI_JOB_LOG_STORE_KB")
            with self._lock:
                self._pending += marker
        if self._handle is not None:
            os.close(self._handle)
            self._handle = None

    def pending(self) -> bytes:
        with self._lock:
            taken, self._pending = bytes(self._pending), bytearray()
        return taken

    def _keep(self, masked: bytes) -> None:
        if not masked:
            return
        self._file(self.file_cap.take(masked))
        if self.store_cap is not None and (copy := self.store_cap.take(masked)):
            with self._lock:
                self._pending += copy

    def _file(self, data: bytes) -> None:
        if not data or self._handle is None:
            return
        try:
            os.write(self._handle, data)
        except OSError as error:  # a full or read-only disk costs the file, never the store's copy or the job
            self.file_error = failure_name(error)
            os.close(self._handle)
            self._handle = None


@dataclass
class RunningOutput:
    """An attempt's output while it runs: the sink the container's follower writes to, and the pump that copies
    what the sink holds for the store there about four times a second (so a follower sees a line within a
    second of its printing)."""

    sink: AttemptOutput
    stem: str
    attempt: int | None
    history: JobHistory | None
    log: EventLog = discard
    _pump: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.history is not None and self.attempt is not None and self.sink.store_cap is not None:
            self._pump = asyncio.ensure_future(self._pumping())

    async def finish(self, now_iso: str) -> None:
        """After the container's end: the last of the output, the markers, and the stream's end entry."""
        if self._pump is not None:
            self._pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pump
        await asyncio.to_thread(self.sink.close)
        if self.sink.file_error is not None:
            self.log("job_log_failed", {"jobId": self.stem, "reason": self.sink.file_error})
        if self.history is None or self.attempt is None:
            return
        await self.history.output(self.stem, self.attempt, self.sink.pending())
        dropped = self.sink.store_cap.dropped if self.sink.store_cap is not None else 0
        fields = {"at": now_iso, "bytes": str(self.sink.total), "dropped": str(dropped)}
        await self.history.ended(self.stem, self.attempt, fields)

    async def _pumping(self) -> None:
        assert self.history is not None and self.attempt is not None
        while True:
            await asyncio.sleep(PUMP_INTERVAL_S)
            await self.history.output(self.stem, self.attempt, self.sink.pending())


@dataclass
class Outputs:
    """Where this worker keeps its attempts' output: `<stem>.log` in PI_LOGS_DIR, and with `store_cap` (None:
    PI_JOB_LOG_STORE=0) the store's copy of each attempt. Either way the attempt's stream says which host has
    its file, so `pi-dispatch logs` can say where to look."""

    logs_dir: Path
    host: str
    file_cap: int
    store_cap: int | None
    history: JobHistory
    log: EventLog = discard

    async def start(self, job_id: str, secrets: Iterable[str], now_iso: str) -> RunningOutput:
        stem = record_stem(job_id)
        attempt = await self.history.next_attempt(stem)
        header = f"attempt={attempt or '?'} host={self.host} started={now_iso}"
        store = Capped(self.store_cap) if attempt is not None and self.store_cap is not None else None
        sink = AttemptOutput(self.logs_dir / f"{stem}.log", header, Masker(secrets), Capped(self.file_cap), store)
        try:
            await asyncio.to_thread(sink.open)
        except OSError as error:  # the store's copy, if any, still has it; the host says why its file does not
            self.log("job_log_failed", {"jobId": stem, "reason": failure_name(error)})
        if attempt is not None:
            fields = {"host": self.host, "at": now_iso, "store": "on" if store is not None else "off"}
            await self.history.started(stem, attempt, fields)
        running = RunningOutput(sink, stem, attempt, self.history if attempt is not None else None, self.log)
        running.start()
        return running


def read_attempt_output(path: Path, attempt: int | None) -> bytes | None:
    """One attempt's part of a host's `<stem>.log` (the last part when attempt is None), or None when there is none."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    parts: list[tuple[int | None, bytearray]] = []
    for line in data.splitlines(keepends=True):
        if line.startswith(ATTEMPT_HEADER):
            number = line[len(ATTEMPT_HEADER) :].split(b" ", 1)[0]
            parts.append((int(number) if number.isdigit() else None, bytearray()))
        elif parts:
            parts[-1][1].extend(line)
    if attempt is None:
        return bytes(parts[-1][1]) if parts else None
    chosen = [bytes(text) for number, text in parts if number == attempt]
    return b"".join(chosen) if chosen else None
