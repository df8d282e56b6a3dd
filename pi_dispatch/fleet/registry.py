"""The host registry on Valkey: this host's heartbeat row, and the reader of everyone's.

Wire-compatible with the reference: `host:live` is a set of names, `host:h:<name>` a hash of string
fields, beats every 15 s with a 90 s TTL. Each beat is one round trip (a MULTI of DEL, HSET, PEXPIRE and
SADD, so the row is exactly this beat's facts and never half-written). Nothing here raises: an outage
is logged once when it starts and once when it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, TypeVar

from pi_dispatch.core.budget import LIMITS_ROW_FIELD, LIMITS_ROW_RE
from pi_dispatch.core.capabilities import CAP_SECRET, CAP_WAIT, ROUTE_FRESH_MS
from pi_dispatch.core.dollarplan import FPUSD_ROW_FIELD
from pi_dispatch.core.jscompat import finite, js_number, js_sorted, js_string, utf16_key
from pi_dispatch.core.keys import HOST_LIVE, REHOME_SILENT, host_row_key
from pi_dispatch.core.names import PROFILE_NAME_RE, WORKER_NAME_RE, worker_name_problem
from pi_dispatch.core.runtimes import ROW_FIELD, RUNTIME_NAME_RE
from pi_dispatch.infra.clock import wall_ms
from pi_dispatch.infra.events import EventLog, discard, failure_fields
from pi_dispatch.infra.valkey import (
    OP_TIMEOUT_S,
    STORE_FAULTS,
    bounded,
    describe,
    out_of_memory,
    per_key_script,
    reply_text,
    reply_whole,
)

if TYPE_CHECKING:
    import redis.asyncio as aioredis

HOST_BEAT_MS: Final = 15_000
HOST_TTL_MS: Final = 90_000
# How far ahead of the reader's clock a beat may be and still count: hosts' clocks differ a little, never by more.
CLOCK_SKEW_MS: Final = 60_000
# A value that looks like a filesystem path is operator topology, not a fact peers need.
PATH_LIKE: Final = re.compile(r"^[/\\]|\\|^[A-Za-z]:[/\\]")

Fact = object | Callable[[], object]
T = TypeVar("T")


def _fact_text(value: object) -> str:
    return "" if value is None else js_string(value)


@dataclass
class HostRegistry:
    """This host's row. `start`, `publish` and `close` never raise; each call is bounded."""

    client: aioredis.Redis
    name: str
    now: Callable[[], int] = wall_ms
    log: EventLog = discard
    timeout_s: float = OP_TIMEOUT_S
    beat_ms: int = HOST_BEAT_MS
    facts: dict[str, Fact] = field(default_factory=dict)
    progress: Callable[[], Mapping[str, str]] | None = None  # fields read afresh for every beat, all at once
    _closed: bool = False
    _failing_facts: set[str] = field(default_factory=set)
    _unreachable: bool = False
    _unreachable_since: float | None = None  # monotonic: when the first beat of the current outage failed
    memory_full_since: float | None = None  # monotonic: since when the store refuses beats for its memory
    last_beat_ms: int = 0  # wall clock of the last beat the store took
    _refused: set[str] = field(default_factory=set)
    _timer: asyncio.Task[None] | None = None
    _inflight: asyncio.Task[bool] | None = None

    def row(self) -> dict[str, str]:
        """The fields the next beat writes: facts re-evaluated, stringified, path-like values dropped."""
        facts = self.facts.items()
        fields = {key: _fact_text(self._called(key, value, None) if callable(value) else value) for key, value in facts}
        if self.progress is not None:
            no_progress: Mapping[str, str] = {}
            fields.update(self._called("progress", self.progress, no_progress))
        fields.update(name=self.name, beatAt=str(self.now()))
        for key, text in list(fields.items()):
            if PATH_LIKE.search(text):
                del fields[key]
                if key not in self._refused:
                    self._refused.add(key)
                    self.log("host_registry_field_refused", {"field": key})
        return fields

    def _called(self, name: str, fact: Callable[[], T], empty: T) -> T:
        """A fact read for this beat; one that fails is left empty, and logged once until it reads again."""
        try:
            value = fact()
        except Exception as error:  # broad: a beat is the host's life; a fact that fails (a bug) must not stop it
            if name not in self._failing_facts:
                self._failing_facts.add(name)
                self.log("host_registry_fact_failed", {"field": name, **failure_fields(error)})
            return empty
        self._failing_facts.discard(name)
        return value

    async def _beat(self) -> bool:
        if self._closed:
            return False
        key = host_row_key(self.name)
        try:
            pipe = self.client.pipeline(transaction=True)
            pipe.delete(key)
            pipe.hset(key, mapping=self.row())
            pipe.pexpire(key, HOST_TTL_MS)
            pipe.sadd(HOST_LIVE, self.name)
            await bounded(pipe.execute(), self.timeout_s)
        except STORE_FAULTS as error:
            if out_of_memory(error):  # the store answers: full, not away (the worker says so, `storememory.py`)
                self.memory_full_since = self.memory_full_since or time.monotonic()
                return False
            if not self._unreachable and not self._closed:
                self._unreachable, self._unreachable_since = True, time.monotonic()
                self.log("host_registry_unreachable", {"reason": describe(error)})
            return False
        self.last_beat_ms = self.now()
        self.memory_full_since = None
        if self._unreachable and not self._closed:
            self._unreachable, self._unreachable_since = False, None
            self.log("host_registry_restored", {})
        return True

    def unreachable_for(self) -> float:
        """Seconds since the store stopped taking this host's beats (0 while it takes them)."""
        return 0.0 if self._unreachable_since is None else time.monotonic() - self._unreachable_since

    async def publish(self) -> bool:
        """Beat now with the current facts. A beat already in flight is awaited, not duplicated."""
        if self._closed:
            return False
        if self._inflight is None or self._inflight.done():
            self._inflight = asyncio.ensure_future(self._beat())
        return await asyncio.shield(self._inflight)

    async def start(self, facts: Mapping[str, Fact] | None = None, *, keep_beating: bool = True) -> bool:
        """Record the facts, beat once, then keep beating (`keep_beating=False`: the caller runs `beat_forever` under
        its own supervision). A second start only publishes."""
        if self._closed or "startedAt" in self.facts:  # started before
            return await self.publish()
        self.facts.update(facts or {})
        self.facts["startedAt"] = str(self.now())
        first = await self.publish()
        if keep_beating:
            self._timer = asyncio.ensure_future(self.beat_forever())
        return first

    async def beat_forever(self) -> None:
        """A beat every `beat_ms` until closed."""
        while not self._closed:
            await asyncio.sleep(self.beat_ms / 1000)
            await self.publish()

    async def close(self, *, keep_row: bool = False) -> None:
        """Stop beating and remove this host's row and membership (`keep_row`: leave the last row to age out, so
        readers go on seeing what it said until a restarted worker replaces it). Idempotent, bounded."""
        if self._closed:
            return
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            with contextlib.suppress(BaseException):
                await self._timer
        if self._inflight is not None and not self._inflight.done():
            # The row is deleted only once a beat in flight has landed, so it cannot resurrect it.
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(asyncio.shield(self._inflight), self.timeout_s)
        if keep_row:
            return
        with contextlib.suppress(*STORE_FAULTS):
            pipe = self.client.pipeline(transaction=True)
            pipe.delete(host_row_key(self.name))
            pipe.srem(HOST_LIVE, self.name)
            pipe.zadd(REHOME_SILENT, {self.name: self.now()}, nx=True)  # re-homing looks at its queue unless it is back
            await bounded(pipe.execute(), self.timeout_s)


@dataclass(frozen=True)
class LiveHosts:
    """Rows read from the registry: wire fields as strings plus the derived `staleMs`; and the rows refused."""

    hosts: list[dict[str, object]]
    invalid: list[InvalidRow] = field(default_factory=list)
    ghosts: list[str] = field(default_factory=list)  # registry entries whose row is gone (expired)


@dataclass(frozen=True)
class InvalidRow:
    """A row nobody routes to, and why: written by a peer that breaks the contract, or by someone forging it."""

    member: str
    reason: str


@dataclass(frozen=True)
class Unreachable:
    """The registry could not be read. Not the same answer as an empty fleet."""

    reason: str


def host_from_row(member: str, row: Mapping[str, str], now_ms: int) -> dict[str, object] | InvalidRow:
    """A reader's host: the row's fields, its name, and `staleMs` when the row can be dated; or why it is refused.

    A row with no readable `beatAt` gets no `staleMs` at all, which routing reads as not live. A name that is not a
    worker name, or differs from the registry entry it was found under, or a beat further ahead than the clock
    skew allowed, is refused: such a row would otherwise steer routing to a queue nobody drains, or stay live
    forever. Unknown fields stay (Node rows carry more).
    """
    name = row.get("name") or member
    if worker_name_problem(name) is not None:
        return InvalidRow(member, "its name is not a worker name")
    if name != member:
        return InvalidRow(member, f"its name differs from the registry entry it is under ({name!r})")
    host: dict[str, object] = dict(row)
    host["name"] = name
    beat = js_number(row["beatAt"]) if row.get("beatAt", "").strip() else math.nan
    if finite(beat):
        ahead = int(beat) - now_ms
        if ahead > CLOCK_SKEW_MS:
            return InvalidRow(member, f"its beat is {ahead // 1000} s in the future (a skewed clock, or forged)")
        host["staleMs"] = max(0, now_ms - int(beat))
    return host


async def read_live_hosts(
    client: aioredis.Redis | None,
    *,
    now: Callable[[], int] = wall_ms,
    timeout_s: float = OP_TIMEOUT_S,
    prune: bool = True,
    fields: Sequence[str] | None = None,
    chunk: int | None = None,
) -> LiveHosts | Unreachable:
    """Every registered host, sorted by name. Two round trips whatever the fleet size (three to prune). A worker,
    which must stay as small with thousands of rows as with none, reads only the `fields` it keeps of each row,
    `chunk` rows a round trip, so the replies it holds at once are bounded whatever the fleet's size."""
    if client is None:
        return Unreachable("no Valkey configured")
    try:
        raw_members = await bounded(client.smembers(HOST_LIVE), timeout_s)
    except STORE_FAULTS as error:
        return Unreachable(describe(error))
    members = js_sorted(reply_text(member) for member in raw_members)
    now_ms = now()
    hosts: list[dict[str, object]] = []
    invalid: list[InvalidRow] = []
    ghosts: list[str] = []
    step = chunk or max(1, len(members))
    for start in range(0, len(members), step):
        part = members[start : start + step]
        try:
            rows = await bounded(_read_rows(client, part, fields), timeout_s)
        except STORE_FAULTS as error:
            return Unreachable(describe(error))
        for member, raw_row in zip(part, rows, strict=True):
            if isinstance(raw_row, BaseException):
                invalid.append(InvalidRow(member, "its entry is not a hash"))
                continue
            if not raw_row:
                ghosts.append(member)
                continue
            read = host_from_row(member, raw_row, now_ms)
            if isinstance(read, InvalidRow):
                invalid.append(read)
            else:
                hosts.append(read)
    if ghosts and prune:  # a host whose row expired is silent for re-homing from now (it may have left jobs)
        with contextlib.suppress(*STORE_FAULTS):
            pipe = client.pipeline(transaction=True)
            pipe.srem(HOST_LIVE, *ghosts)
            pipe.zadd(REHOME_SILENT, dict.fromkeys(ghosts, now_ms), nx=True)
            await bounded(pipe.execute(), timeout_s)
    hosts.sort(key=lambda host: utf16_key(str(host["name"])))
    return LiveHosts(hosts, invalid, ghosts)


async def _read_rows(client: aioredis.Redis, members: list[str], fields: Sequence[str] | None) -> list[Any]:
    """These hosts' rows in one round trip: whole rows by the `rows` script (a fleet-sized pipeline of HGETALLs
    costs the reader several times more), or only `fields` of each (`queue_row_reads`, `row_of`)."""
    if fields is None:
        parts = await per_key_script(client, "rows", [host_row_key(member) for member in members])
        return [_whole_row(reply) for part in parts for reply in json.loads(reply_text(part))]
    pipe = client.pipeline(transaction=False)
    queue_row_reads(pipe, members, fields)
    return [row_of(reply, fields) for reply in await pipe.execute(raise_on_error=False)]


def queue_row_reads(pipe: Any, members: Sequence[str], fields: Sequence[str] | None) -> None:
    """Add to a pipeline the read of each host's row: whole, or only `fields`."""
    for member in members:
        if fields is None:
            pipe.hgetall(host_row_key(member))
        else:
            pipe.hmget(host_row_key(member), list(fields))


def _whole_row(reply: Any) -> Mapping[str, str] | BaseException:
    """One row as the `rows` script answers it: its fields (text), or false when the entry is no hash."""
    if not isinstance(reply, dict):
        return ValueError("the host's entry is not a hash")  # read as the pipeline's WRONGTYPE reply would be
    return reply


def row_of(reply: Any, fields: Sequence[str] | None) -> Any:
    """One reply of `queue_row_reads`: a whole row as stored, or the `fields` it has as text (a row that is gone
    reads as empty either way); an error reply (the entry is no hash) as it is."""
    if fields is None or isinstance(reply, BaseException):
        return reply
    return {key: reply_text(value) for key, value in zip(fields, reply, strict=True) if value is not None}


async def beating(
    client: aioredis.Redis, names: Iterable[str], now_ms: int, timeout_s: float = OP_TIMEOUT_S
) -> set[str]:
    """Which of these hosts' own rows say they are live now, in one round trip: for a reader of the fleet's
    snapshot (a beat behind a host that just started or came back) about to act on a host it thinks silent."""
    listed = sorted(set(names))
    if not listed:
        return set()
    pipe = client.pipeline(transaction=False)
    for name in listed:
        pipe.hget(host_row_key(name), "beatAt")
    beats = await bounded(pipe.execute(), timeout_s)
    return {
        name
        for name, beat in zip(listed, beats, strict=True)
        if (stamp := reply_whole(beat)) is not None and now_ms - stamp <= ROUTE_FRESH_MS
    }


_TOKEN: Final = f"[{CAP_SECRET}{CAP_WAIT}]:{PROFILE_NAME_RE.pattern}"
_RUNTIME: Final = RUNTIME_NAME_RE.pattern
_ROW_SHAPES: Final = {
    "name": WORKER_NAME_RE,
    "beatAt": re.compile(r"[0-9]{1,16}"),
    "startedAt": re.compile(r"[0-9]{1,16}"),
    "routes": re.compile(r"true|false"),
    "caps": re.compile(rf"(?:{_TOKEN}(?:,{_TOKEN})*)?"),
    ROW_FIELD: re.compile(rf"(?:{_RUNTIME}(?:,{_RUNTIME})*)?"),
    LIMITS_ROW_FIELD: LIMITS_ROW_RE,
    FPUSD_ROW_FIELD: re.compile(r"[0-9a-f]{16}"),
    "concurrency": re.compile(r"[0-9]*"),
    "pid": re.compile(r"[0-9]*"),
}


def check_registry_row(row: object) -> list[str]:
    """Why a registry row breaks the wire shape (all string values, name and beatAt, no paths), if it does."""
    if not isinstance(row, Mapping):
        return ["a row is a hash of fields"]
    found = [f"{key} is missing" for key in ("name", "beatAt") if key not in row]
    for key, value in row.items():
        if not isinstance(value, str):
            found.append(f"{key}: values are strings")
        elif key in _ROW_SHAPES and not _ROW_SHAPES[key].fullmatch(value):
            found.append(f"{key}: {value!r} is not valid")
        elif PATH_LIKE.search(value):
            found.append(f"{key}: {value!r} looks like a path")
    return found
