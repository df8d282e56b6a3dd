"""The registry read once per beat for the whole fleet: one elected reader publishes a compact snapshot of the rows
that every worker and router reads with one command.

Each worker needs the live rows every beat (its orphan sweep, stealing, re-homing) and each router before it
routes; every one of them reading every row would make the fleet's idle load grow with the square of its size.
Instead, whoever finds the snapshot older than a beat and wins `host:snapshot:lease` (SET NX, a beat long) reads
the registry (two round trips, ghosts pruned, as `read_live_hosts` does) and writes `host:snapshot` (this port's
own key: JSON of the rows' routing fields, with when it was read); everyone else GETs it. Rows stay in the
reference's format and are written by each host's own beat as before, so Node workers and routers see nothing new.
A reader parses the snapshot's rows with the same checks as a direct read, as of when it was read (one moment of
the fleet, a beat old at most while its readers refresh it); a snapshot older than MAX_AGE_MS is not used: the
reader reads the registry itself.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from pi_dispatch.core.capabilities import with_drains
from pi_dispatch.core.keys import DRAINED_HOSTS, HOST_SNAPSHOT, HOST_SNAPSHOT_LEASE, REHOME_SILENT
from pi_dispatch.fleet.registry import (
    HOST_BEAT_MS,
    InvalidRow,
    LiveHosts,
    Unreachable,
    host_from_row,
    read_live_hosts,
)
from pi_dispatch.infra.clock import wall_ms
from pi_dispatch.infra.valkey import OP_TIMEOUT_S, STORE_FAULTS, bounded, describe

if TYPE_CHECKING:
    import redis.asyncio as aioredis

# The fields a snapshot keeps of each row: what routing, liveness, stealing, re-homing and cron's refusals read.
SNAPSHOT_FIELDS: Final = (
    "name",
    "beatAt",
    "routes",
    "caps",
    "consumer",
    "draining",
    "unhealthy",
    "slotsFree",
    "concurrency",
    "tz",
    "fpCron",
)
ROW_CHUNK: Final = 250  # rows a worker's registry read holds at once: its memory stays flat as the fleet grows
MAX_AGE_MS: Final = 3 * HOST_BEAT_MS  # past this a snapshot is not evidence of anything
TTL_MS: Final = 4 * HOST_BEAT_MS


@dataclass(frozen=True)
class FleetView:
    """The live rows as a reader sees them now, and how old the registry read behind them is."""

    live: LiveHosts
    age_ms: int
    direct: bool  # read from the registry itself, not from a snapshot


def _compact(row: Mapping[str, object]) -> dict[str, str]:
    return {key: str(row[key]) for key in SNAPSHOT_FIELDS if key in row and key != "staleMs"}


def parse_snapshot(raw: bytes | str | None, now_ms: int) -> tuple[LiveHosts, int] | None:
    """The rows of a snapshot as a direct read gave them when it was taken (each `staleMs` as of then: the view
    is one moment of the fleet, said to be `age` old), and its age; None for none, a bad one or one too old."""
    if raw is None:
        return None
    try:
        document = json.loads(raw)
        at, rows = int(document["at"]), document["rows"]
    except (ValueError, TypeError, KeyError):
        return None
    if not isinstance(rows, list) or not 0 <= now_ms - at <= MAX_AGE_MS:
        return None
    hosts: list[dict[str, object]] = []
    invalid: list[InvalidRow] = []
    for index, row in enumerate(rows):
        rows[index] = None  # each parsed row let go as it is read: a reader holds one copy of the fleet, not two
        if not isinstance(row, dict) or not all(isinstance(value, str) for value in row.values()):
            continue
        read = host_from_row(str(row.get("name", "")), row, at)
        if isinstance(read, InvalidRow):
            invalid.append(read)
        else:
            hosts.append(read)
    return LiveHosts(hosts, invalid), now_ms - at


async def publish(
    client: aioredis.Redis, now: Callable[[], int] = wall_ms, timeout_s: float = OP_TIMEOUT_S
) -> LiveHosts | Unreachable:
    """Read the registry and publish it as the snapshot; hosts whose rows are gone are marked silent for re-homing."""
    live = await compact_registry(client, now, timeout_s)
    if not isinstance(live, LiveHosts):
        return live
    at = now()
    # written row by row: the publisher holds the rows it read (the snapshot's fields only) and their text, once
    rows = ",".join(json.dumps(_compact(row), separators=(",", ":")) for row in live.hosts)
    pipe = client.pipeline(transaction=False)
    pipe.set(HOST_SNAPSHOT, f'{{"at":{at},"rows":[{rows}]}}', px=TTL_MS)
    if live.ghosts:
        pipe.zadd(REHOME_SILENT, dict.fromkeys(live.ghosts, at), nx=True)
    await bounded(pipe.execute(), timeout_s)
    return live  # what every other reader sees: the snapshot's fields, and each row's staleness as read


async def fleet_view(
    client: aioredis.Redis,
    *,
    now: Callable[[], int] = wall_ms,
    refresh_after_ms: int = HOST_BEAT_MS,
    timeout_s: float = OP_TIMEOUT_S,
) -> FleetView | Unreachable:
    """The live rows: the snapshot when it is fresh; else this reader refreshes it when it wins the lease, or reads
    the registry itself when the snapshot is too old to use and someone else holds the lease. Read in the same
    round trip as the snapshot, the operator's drains and resumes count at once (`with_drains`)."""
    try:
        pipe = client.pipeline(transaction=False)
        pipe.get(HOST_SNAPSHOT)
        pipe.smembers(DRAINED_HOSTS)
        raw, members = await bounded(pipe.execute(raise_on_error=False), timeout_s)
    except STORE_FAULTS as error:
        return Unreachable(describe(error))
    if isinstance(raw, BaseException):
        return Unreachable(describe(raw))
    drained = drained_names(members)  # a drain set that is no set (hand-written): the rows' own word stands
    parsed = parse_snapshot(raw, now())
    if parsed is not None and parsed[1] < refresh_after_ms:
        return FleetView(_drained(parsed[0], drained), parsed[1], direct=False)
    try:
        won = await bounded(
            client.set(HOST_SNAPSHOT_LEASE, secrets.token_hex(4), nx=True, px=refresh_after_ms), timeout_s
        )
    except STORE_FAULTS as error:
        return Unreachable(describe(error))
    if not won and parsed is not None:  # being refreshed by another reader; fresh enough
        return FleetView(_drained(parsed[0], drained), parsed[1], direct=False)
    live = await publish(client, now, timeout_s) if won else await compact_registry(client, now, timeout_s)
    if not isinstance(live, LiveHosts):
        return live
    return FleetView(_drained(live, drained), 0, direct=True)


def drained_names(members: object) -> frozenset[str] | None:
    """The names in `control:drained` as read; None for a reply of any other shape (an error among them): then each
    row's own `draining` is all there is to go by."""
    if not isinstance(members, set | list):
        return None
    return frozenset(m.decode("utf-8", "replace") if isinstance(m, bytes) else str(m) for m in members)


async def read_drained(client: aioredis.Redis, timeout_s: float = OP_TIMEOUT_S) -> frozenset[str] | None:
    """The hosts the operator drains now, in one round trip (the store's errors are raised)."""
    pipe = client.pipeline(transaction=False)
    pipe.smembers(DRAINED_HOSTS)
    (members,) = await bounded(pipe.execute(raise_on_error=False), timeout_s)
    return drained_names(members)


async def compact_registry(
    client: aioredis.Redis, now: Callable[[], int] = wall_ms, timeout_s: float = OP_TIMEOUT_S
) -> LiveHosts | Unreachable:
    """The registry as a snapshot keeps it, read directly: each row's routing fields only, ROW_CHUNK rows a round
    trip (what a worker reads when it publishes the snapshot, or cannot use it)."""
    return await read_live_hosts(client, now=now, timeout_s=timeout_s, fields=SNAPSHOT_FIELDS, chunk=ROW_CHUNK)


async def registry_now(client: aioredis.Redis, timeout_s: float = OP_TIMEOUT_S) -> LiveHosts | Unreachable:
    """The registry read directly (as an operator's command reads it), the operator's drains applied."""
    live = await read_live_hosts(client, timeout_s=timeout_s)
    if not isinstance(live, LiveHosts):
        return live
    try:
        return _drained(live, await read_drained(client, timeout_s))
    except STORE_FAULTS as error:
        return Unreachable(describe(error))


def _drained(live: LiveHosts, drained: frozenset[str] | None) -> LiveHosts:
    return live if drained is None else LiveHosts(with_drains(live.hosts, drained), live.invalid, live.ghosts)
