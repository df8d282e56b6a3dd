"""A job's history in the store, fleet-wide: every attempt's record, and each attempt's masked output.

This port's own keys (a Node fleet neither reads nor writes them), keyed by the job's record stem:
`runs:att:<stem>` is a LIST of the job's attempt records, oldest first (the reference's `runs:rec:<stem>` keeps
the last one only); `runs:log:<stem>:<n>` is a STREAM of attempt n's output: a `start` entry (host, when, and
whether the output is copied here at all), `t` entries of output text, and an `end` entry (bytes, dropped). An
attempt's number is how many attempts of the job had a record before it, plus one, so a retried job's attempts
continue its history. Both live as long as the mirror's records. `runs:spill:<host>` is a HASH of the run records
that host's disk refused, by stem, kept until each file is written. Writers never raise; readers say
"unreachable" rather than "empty".
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from pi_dispatch.core.jscompat import js_json, js_json_parse
from pi_dispatch.core.keys import job_log_key, run_attempts_key, run_spill_key
from pi_dispatch.infra.events import EventLog, discard
from pi_dispatch.infra.valkey import OP_TIMEOUT_S, STORE_FAULTS, bounded, describe

if TYPE_CHECKING:
    import redis.asyncio as aioredis

ATTEMPTS_MAX: Final = 100  # a job retried more often than this keeps its newest attempts
CHUNK_BYTES: Final = 64 * 1024  # one stream entry at most; a reader pages through entries, never one huge value


@dataclass
class JobHistory:
    """The writer, for one worker: attempt numbers, attempt records and output streams."""

    client: aioredis.Redis
    window_ms: int
    log: EventLog = discard
    timeout_s: float = OP_TIMEOUT_S
    _failing: bool = field(default=False, init=False)

    async def next_attempt(self, stem: str) -> int | None:
        """This attempt's number, or None while the store cannot say (its output then goes to the host only)."""
        try:
            return int(await bounded(self.client.llen(run_attempts_key(stem)), self.timeout_s)) + 1
        except STORE_FAULTS as error:
            self._failed(stem, error)
            return None

    async def remember(self, record: Mapping[str, Any], stem: str) -> bool:
        """Append one attempt's record to the job's list, trimmed and kept as long as the mirror's."""
        key = run_attempts_key(stem)
        pipe = self.client.pipeline(transaction=True)
        pipe.rpush(key, js_json(record))
        pipe.ltrim(key, -ATTEMPTS_MAX, -1)
        pipe.pexpire(key, self.window_ms)
        return await self._run(pipe, stem)

    async def spill(self, host: str, stem: str, record: Mapping[str, Any]) -> bool:
        """Keep a record the disk refused in the store until its file is written (`unspill`)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.hset(run_spill_key(host), stem, js_json(record))
        return await self._run(pipe, stem)

    async def unspill(self, host: str, stem: str) -> bool:
        pipe = self.client.pipeline(transaction=False)
        pipe.hdel(run_spill_key(host), stem)
        return await self._run(pipe, stem)

    async def spilled(self, host: str) -> dict[str, Mapping[str, Any]]:
        """The records this host's disk refused, by stem (a value that is not a record is left out)."""
        raw = await bounded(self.client.hgetall(run_spill_key(host)), self.timeout_s)
        found: dict[str, Mapping[str, Any]] = {}
        for stem, text in raw.items():
            with contextlib.suppress(ValueError, TypeError):
                record = js_json_parse(_str(text))
                if isinstance(record, dict):
                    found[_str(stem)] = record
        return found

    async def started(self, stem: str, attempt: int, fields: Mapping[str, str]) -> bool:
        return await self._mark(stem, attempt, "start", fields)

    async def output(self, stem: str, attempt: int, data: bytes) -> bool:
        if not data:
            return True
        key = job_log_key(stem, attempt)
        pipe = self.client.pipeline(transaction=False)
        for offset in range(0, len(data), CHUNK_BYTES):
            pipe.xadd(key, {"t": data[offset : offset + CHUNK_BYTES]})
        return await self._run(pipe, stem)

    async def ended(self, stem: str, attempt: int, fields: Mapping[str, str]) -> bool:
        return await self._mark(stem, attempt, "end", fields)

    async def _mark(self, stem: str, attempt: int, kind: str, fields: Mapping[str, str]) -> bool:
        """An attempt's start or end entry, its stream kept as long as the records (from its first entry on)."""
        key = job_log_key(stem, attempt)
        entry: dict[Any, Any] = {kind: "1", **fields}
        pipe = self.client.pipeline(transaction=True)
        pipe.xadd(key, entry)
        pipe.pexpire(key, self.window_ms)
        return await self._run(pipe, stem)

    async def _run(self, pipe: Any, stem: str) -> bool:
        try:
            await bounded(pipe.execute(), self.timeout_s)
        except STORE_FAULTS as error:
            self._failed(stem, error)
            return False
        if self._failing:
            self._failing = False
            self.log("job_history_restored", {"jobId": stem})
        return True

    def _failed(self, stem: str, error: Exception) -> None:
        if not self._failing:
            self._failing = True
            self.log("job_history_failed", {"jobId": stem, "reason": describe(error)})


@dataclass(frozen=True)
class Entry:
    """One entry of an attempt's output stream."""

    id: str
    kind: str  # start, text or end
    fields: Mapping[str, str]
    text: bytes = b""


def _entry(raw_id: bytes | str, raw: Mapping[bytes, bytes]) -> Entry:
    fields = {_str(key): value for key, value in raw.items()}
    entry_id = _str(raw_id)
    if "t" in fields:
        return Entry(entry_id, "text", {}, fields["t"])
    decoded = {key: _str(value) for key, value in fields.items()}
    return Entry(entry_id, "start" if "start" in decoded else "end" if "end" in decoded else "other", decoded)


def _str(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


async def read_attempts(client: aioredis.Redis, stem: str, timeout_s: float = OP_TIMEOUT_S) -> list[dict[str, Any]]:
    """The job's attempt records in the store, oldest first (unparseable ones skipped). Raises on a store error."""
    raw = await bounded(client.lrange(run_attempts_key(stem), 0, -1), timeout_s)
    records = []
    for body in raw:
        with contextlib.suppress(ValueError):
            record = js_json_parse(body)
            if isinstance(record, dict):
                records.append(record)
    return records


async def log_attempts(client: aioredis.Redis, stem: str, upto: int, timeout_s: float = OP_TIMEOUT_S) -> list[int]:
    """Which of attempts 1..upto have an output stream, in one round trip."""
    pipe = client.pipeline(transaction=False)
    for attempt in range(1, upto + 1):
        pipe.exists(job_log_key(stem, attempt))
    found = await bounded(pipe.execute(), timeout_s)
    return [attempt for attempt, present in enumerate(found, start=1) if present]


async def read_entries(
    client: aioredis.Redis,
    stem: str,
    attempt: int,
    after: str = "-",
    *,
    count: int = 500,
    timeout_s: float = OP_TIMEOUT_S,
) -> list[Entry]:
    """Entries of an attempt's stream after `after` (exclusive; "-" from the start), at most count."""
    start = "-" if after == "-" else f"({after}"
    raw = await bounded(client.xrange(job_log_key(stem, attempt), start, "+", count=count), timeout_s)
    return [_entry(entry_id, fields) for entry_id, fields in raw]


async def wait_entries(
    client: aioredis.Redis,
    stem: str,
    attempt: int,
    after: str,
    *,
    block_ms: int = 1_000,
    timeout_s: float = OP_TIMEOUT_S,
) -> list[Entry]:
    """New entries after `after`, waiting up to block_ms for the first (a follower's one round trip a second)."""
    key = job_log_key(stem, attempt)
    answer = await bounded(client.xread({key: after}, count=500, block=block_ms), timeout_s + block_ms / 1000)
    return [_entry(entry_id, fields) for _key, entries in answer or [] for entry_id, fields in entries]
