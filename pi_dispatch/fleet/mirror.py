"""The fleet-visible copy of the run history, wire-compatible with the reference's run mirror.

The record FILE is the record; this is a view of it. The pure half (`mirror_window_ms`, `merge_runs`,
`hosts_in`) does no I/O. The writer puts one record in one round trip (a MULTI of SET PX, ZADD, both
trims and the rolling PEXPIRE); the reader takes two whatever the count. Neither raises.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from pi_dispatch.core.jscompat import (
    DAY_MS,
    MISSING,
    date_parse,
    finite,
    get,
    js_json,
    js_json_parse,
    js_number,
    js_sorted,
    nullish,
    truthy,
)
from pi_dispatch.core.keys import RUNS_INDEX, run_record_key
from pi_dispatch.infra.clock import wall_ms
from pi_dispatch.infra.events import EventLog, discard
from pi_dispatch.infra.valkey import OP_TIMEOUT_S, STORE_FAULTS, bounded, describe

if TYPE_CHECKING:
    import redis.asyncio as aioredis

__all__ = [
    "MIRROR_MAX_DAYS",
    "RUNS_INDEX",
    "RUNS_INDEX_MAX",
    "MirroredRuns",
    "RunMirror",
    "hosts_in",
    "merge_runs",
    "mirror_window_ms",
    "read_mirrored_runs",
    "run_record_key",
]

# The deepest window any reader asks for; a longer one would hold bytes nothing can request.
MIRROR_MAX_DAYS: Final = 92
# The window alone does not bound memory on a busy fleet; this caps the index at what a panel shows.
RUNS_INDEX_MAX: Final = 5_000


def mirror_window_ms(retention_days: object) -> float:
    """How long a mirrored record lives: the file retention, at most 92 days; 0 (keep forever) is 92."""
    days = js_number(retention_days)
    window_days = min(days, MIRROR_MAX_DAYS) if days > 0 else MIRROR_MAX_DAYS
    window = window_days * DAY_MS
    return int(window) if float(window).is_integer() else window


def _record_time(record: object) -> float:
    ended = get(record, "endedAt")
    stamp = ended if not nullish(ended) else get(record, "startedAt")
    parsed = date_parse("" if nullish(stamp) else stamp)
    return parsed if finite(parsed) else -math.inf


def _identity(job_id: object) -> tuple[str, object]:
    """A Map key with JavaScript's SameValueZero: 1 and "1" differ, objects are distinct by identity."""
    if isinstance(job_id, str):
        return ("string", job_id)
    if isinstance(job_id, bool):
        return ("boolean", job_id)
    if isinstance(job_id, int | float):
        return ("number", float(job_id))
    return ("object", id(job_id))


def merge_runs(local: object, mirrored: object, limit: int = 50) -> list[Any]:
    """One list from this host's records and the fleet mirror, newest first.

    Deduplicated by job id, keeping the later `endedAt` (a retry may have completed on another host);
    local wins an exact tie; the cut comes after the sort so neither source's length decides.
    """
    by_id: dict[tuple[str, object], Any] = {}
    for record in mirrored if isinstance(mirrored, list) else []:
        job_id = get(record, "jobId")
        if truthy(job_id):
            by_id[_identity(job_id)] = record
    for record in local if isinstance(local, list) else []:
        job_id = get(record, "jobId")
        if not truthy(job_id):
            continue
        key = _identity(job_id)
        seen = by_id.get(key, MISSING)
        if seen is MISSING or _record_time(record) >= _record_time(seen):
            by_id[key] = record
    ordered = sorted(by_id.values(), key=lambda record: -_record_time(record))
    return ordered[: max(0, limit)]


def hosts_in(runs: object) -> list[str]:
    """The distinct hosts named by the records themselves, sorted."""
    names = set()
    for record in runs if isinstance(runs, list) else []:
        host = get(record, "host")
        if isinstance(host, str) and host != "":
            names.add(host)
    return js_sorted(names)


@dataclass
class RunMirror:
    """The writer. `mirror` returns whether the record reached the fleet view; it never raises."""

    client: aioredis.Redis | None
    retention_days: object
    now: Callable[[], int] = wall_ms
    log: EventLog = discard
    timeout_s: float = OP_TIMEOUT_S
    index_max: int = RUNS_INDEX_MAX
    _failing: bool = field(default=False, init=False)

    async def mirror(self, record: Mapping[str, Any] | None, sanitized_job_id: str) -> bool:
        if self.client is None or not record or not sanitized_job_id:
            return False
        try:
            window = int(mirror_window_ms(self.retention_days))
            now_ms = self.now()
            stamp = _record_time(record)
            score = stamp if finite(stamp) else now_ms
            pipe = self.client.pipeline(transaction=True)
            pipe.set(run_record_key(sanitized_job_id), js_json(record), px=window)
            pipe.zadd(RUNS_INDEX, {sanitized_job_id: score})
            pipe.zremrangebyscore(RUNS_INDEX, "-inf", f"({now_ms - window}")
            pipe.zremrangebyrank(RUNS_INDEX, 0, -self.index_max - 1)
            # Rolling: an activity index should live as long as there is activity to show.
            pipe.pexpire(RUNS_INDEX, window)
            await bounded(pipe.execute(), self.timeout_s)
        except STORE_FAULTS as error:
            if not self._failing:
                self._failing = True
                self.log("run_mirror_failed", {"jobId": sanitized_job_id, "reason": describe(error)})
            return False
        if self._failing:
            self._failing = False
            self.log("run_mirror_restored", {"jobId": sanitized_job_id})
        return True


@dataclass(frozen=True)
class MirroredRuns:
    """What the mirror holds, and how far to trust it: `ok`, `off`, `truncated` or `unreachable (...)`."""

    runs: list[Any]
    degraded: str
    skipped: int = 0  # members whose record could not be read as one


async def read_mirrored_runs(
    client: aioredis.Redis | None, *, limit: int = 50, since_ms: int = 0, timeout_s: float = OP_TIMEOUT_S
) -> MirroredRuns:
    """The newest mirrored records; expired or unparseable members are pruned as they are met."""
    if client is None:
        return MirroredRuns([], "off")
    try:
        raw_ids = await bounded(
            client.zrevrangebyscore(RUNS_INDEX, "+inf", f"({since_ms}", start=0, num=max(1, limit)), timeout_s
        )
    except STORE_FAULTS as error:
        return MirroredRuns([], f"unreachable ({describe(error)})")
    if not raw_ids:
        return MirroredRuns([], "off")
    try:
        bodies = await bounded(client.mget([run_record_key(_text(member)) for member in raw_ids]), timeout_s)
    except STORE_FAULTS as error:
        return MirroredRuns([], f"unreachable ({describe(error)})")
    runs: list[Any] = []
    stale: list[bytes | str] = []
    for member, body in zip(raw_ids, bodies, strict=True):
        try:
            record = js_json_parse(body) if body else None
        except ValueError:
            record = None
        if isinstance(record, dict):
            runs.append(record)
        else:
            stale.append(member)
    if stale:
        # Best effort: a straggler costs one skipped row next time, never a wrong one.
        with contextlib.suppress(*STORE_FAULTS):
            await bounded(client.zrem(RUNS_INDEX, *stale), timeout_s)
    return MirroredRuns(runs, "truncated" if len(runs) >= limit else "ok", len(stale))


def _text(member: bytes | str) -> str:
    return member.decode("utf-8", "surrogateescape") if isinstance(member, bytes) else member
