"""What is asked of the Sentinels before a write counts or a take is kept: how many replicas a write must reach
(`ReplicaCount`), and whether the node they name primary holds a job's lock (`PrimaryCheck`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import redis.asyncio as aioredis
from redis import exceptions as redis_errors
from redis.asyncio.sentinel import Sentinel

from pi_dispatch.infra.sentinel import sentinel_of
from pi_dispatch.infra.store import StoreAddress, database_of
from pi_dispatch.infra.valkey import OP_TIMEOUT_S, connect, reply_text


class NotPrimary(ConnectionError):
    """The Sentinels name another node primary than the one a write reached: an old primary, whose writes the
    failover that demoted it drops."""


@dataclass
class ReplicaCount:
    """How many replicas a write to the node a connection reached must reach: every replica the Sentinels see up (one
    at least), read with the primary they name, at most once per `ttl_s`.

    One replica's WAIT is not enough: in a failover with the old primary still reachable, the replica promoted stops
    replicating first, the other still confirms writes to the old primary, then resynchronises from the new one and
    drops them. Counting the replicas the Sentinels know (`_replica_up`), the old primary cannot confirm a write once
    one of them is promoted, so such a write is not acknowledged. A replica that dies lowers the count once the
    Sentinels mark it down (its `down-after-milliseconds`); until then writes wait in vain and are refused, never
    lost.

    Nor is the count enough once the Sentinels have switched: they list the new primary's replicas, each afresh (not
    yet connected, not counted), so the count falls to one, which the old primary's last replica still gives until
    it too is moved. A write therefore counts only on the node the Sentinels name primary; on another it is refused
    (`NotPrimary`). A Sentinel that has not yet heard of the switch names the old primary with its replicas, the
    promoted one among them (it reports itself primary), so the old primary cannot confirm that count either."""

    store: StoreAddress
    ttl_s: float = 1.0
    clock: Callable[[], float] = time.monotonic
    _known: int = 1
    _primary: tuple[str, int] | None = None
    _asked_at: float = float("-inf")
    _sentinel: Sentinel | None = None

    async def required(self, serving: tuple[str, int]) -> int:
        """The replicas a write `serving` took must reach; NotPrimary when the Sentinels name another primary (asked
        again at once when the last answer named another: the connection may have followed a promotion)."""
        if self.clock() - self._asked_at >= self.ttl_s or self._primary != serving:
            await self._ask()
        if self._primary != serving:
            named = "no primary" if self._primary is None else f"{self._primary[0]}:{self._primary[1]}"
            raise NotPrimary(f"the Sentinels name {named} primary, not {serving[0]}:{serving[1]} that took the write")
        return self._known

    async def _ask(self) -> None:
        """The first Sentinel that answers: the primary it names and the replicas of it it sees up."""
        self._asked_at = self.clock()
        if self._sentinel is None:
            self._sentinel = sentinel_of(self.store, OP_TIMEOUT_S)
        name = self.store.primary_name
        answered = await _first_answer(
            self._sentinel, ("SENTINEL", "GET-MASTER-ADDR-BY-NAME", name), ("SENTINEL", "REPLICAS", name)
        )
        if answered is not None:
            address, listed = answered
            self._primary = _address(address)
            self._known = max(1, sum(1 for entry in listed if _replica_up(entry)))

    async def close(self) -> None:
        if self._sentinel is not None:
            for watcher in self._sentinel.sentinels:
                await watcher.aclose()


@dataclass
class PrimaryCheck:
    """Whether a key holds a value on the node the Sentinels name primary now: what a worker asks of a job's lock
    after taking it, before it spends anything on it.

    A primary frozen long enough to be replaced may wake and serve a take of a job the new primary has already given
    to another worker, until the Sentinels demote it (seconds later). Its lock is on the old primary only: read on the
    node the Sentinels name, it is another's or absent. A Sentinel is asked each time (a cached answer is the window
    this closes), and the named node through a connection of its own to that address."""

    store: StoreAddress
    _sentinel: Sentinel | None = None
    _nodes: dict[tuple[str, int], aioredis.Redis] = field(default_factory=dict)

    async def holds(self, key: str, value: str) -> bool:
        """True when the named primary holds `value` at `key`; False when it holds anything else, or when no Sentinel
        names one or the named node does not answer (what cannot be confirmed is not)."""
        if self._sentinel is None:
            self._sentinel = sentinel_of(self.store, OP_TIMEOUT_S)
        answered = await _first_answer(self._sentinel, ("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.store.primary_name))
        primary = _address(answered[0]) if answered is not None else None
        if primary is None:
            return False
        node = self._nodes.get(primary)
        if node is None:
            user = f"{quote(self.store.username, safe='')}@" if self.store.username else ""
            address = f"redis://{user}{primary[0]}:{primary[1]}/{database_of(self.store.url)}"
            node = self._nodes[primary] = connect(address, self.store.password, OP_TIMEOUT_S)
        try:
            found = await node.get(key)
        except redis_errors.RedisError:
            return False
        return found is not None and reply_text(found) == value

    async def close(self) -> None:
        for node in self._nodes.values():
            await node.aclose()
        if self._sentinel is not None:
            for watcher in self._sentinel.sentinels:
                await watcher.aclose()


async def _first_answer(sentinel: Sentinel, *commands: tuple[str, ...]) -> list[Any] | None:
    """The replies of the first Sentinel that answers every command; None when none does."""
    for watcher in sentinel.sentinels:
        try:
            return [await watcher.execute_command(*command) for command in commands]  # type: ignore[no-untyped-call]
        except redis_errors.RedisError:
            continue
    return None


def _address(reply: Any) -> tuple[str, int] | None:
    """A GET-MASTER-ADDR-BY-NAME reply as (host, port); None when it names none."""
    if not isinstance(reply, (list, tuple)) or len(reply) != 2:
        return None
    host, port = reply_text(reply[0]), reply_text(reply[1])
    return (host, int(port)) if port.isascii() and port.isdigit() else None


def _replica_up(entry: Any) -> bool:
    """Whether one entry of SENTINEL REPLICAS (a flat list of names and values) is a replica a write must reach: one
    up and in sync with its primary, or one that reports itself primary (promoted, or an old primary not yet turned
    into a replica): counting those, an old primary never confirms a write alone. One still loading its first copy
    is not counted, so a replica that comes back does not hold writes up while it catches up.

    A replica the Sentinel is merely disconnected from is counted as it last saw it: the replica a failover promotes
    closes every client's connection as it is promoted (Sentinel's `CLIENT KILL TYPE normal`), the Sentinels' own
    among them, so for a moment every Sentinel has it `disconnected`; left out, the count fell to the one replica
    still confirming the old primary's writes. Only one the Sentinels judge down is left out."""
    raw = dict(zip(entry[::2], entry[1::2], strict=False)) if isinstance(entry, list) else {}
    fields = {reply_text(name): reply_text(value) for name, value in raw.items()}
    if {"s_down", "o_down"} & set(fields.get("flags", "").split(",")):
        return False
    return fields.get("master-link-status") == "ok" or fields.get("role-reported") == "master"
