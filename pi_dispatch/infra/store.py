"""Where the store is: one plain Valkey at a URL, or a replicated one whose primary Sentinel names.

Every client of the fleet (the worker and its BullMQ consumers, the receiver, each CLI command, the demo) is built
from a `StoreAddress`, so a replicated store is named one way everywhere: `VALKEY_SENTINELS` (the Sentinels'
`host:port`, comma separated), `VALKEY_PRIMARY_NAME` (the name they monitor) and `VALKEY_SENTINEL_PASSWORD`; the
URL then supplies only the database number and `VALKEY_PASSWORD` the store's own password. redis-py's Sentinel
client asks the Sentinels for the primary on each new connection and drops a connection the old primary answers
`READONLY` on, so after a promotion the next command reaches the new primary. A plain URL is used as before.
"""

from __future__ import annotations

import hashlib
import os
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import quote, unquote, urlsplit

import redis.asyncio as aioredis
from redis import exceptions as redis_errors
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import MasterNotFoundError, Sentinel, SentinelConnectionPool, SentinelManagedConnection
from redis.backoff import NoBackoff

from pi_dispatch.infra.valkey import (
    DEFAULT_VALKEY_URL,
    OP_TIMEOUT_S,
    StoreClient,
    connect,
    fleet_id,
    reply_text,
    shown,
    with_password,
)

DEFAULT_PRIMARY_NAME: Final = "pi-dispatch"
NO_REPLICAS: Final = "NOREPLICAS"
STORE_VARIABLES: Final = (  # every variable that names the store
    "VALKEY_URL",
    "VALKEY_PASSWORD",
    "VALKEY_SENTINELS",
    "VALKEY_PRIMARY_NAME",
    "VALKEY_SENTINEL_PASSWORD",
)


class FollowingConnection(SentinelManagedConnection):
    """A connection to whichever node the Sentinels name primary when it (re)connects, which leaves a primary that
    can no longer replicate.

    redis-py's own asks the Sentinels only when a pool hands it out: one that reconnects on its own, as a
    single-connection client's does after an error, dials the address it had, the dead primary, for good. And a
    primary cut off from its replicas answers every write `NOREPLICAS` (the store's `min-replicas-to-write`) while
    the Sentinels promote another: taken as the connection's end, the next command asks them where the primary is.
    """

    async def connect_check_health(self, check_health: bool = True, retry_socket_connect: bool = True) -> None:
        if not self.is_connected and self.connection_pool.is_master:
            self.host, self.port = await self.connection_pool.get_master_address()
        await super().connect_check_health(check_health=check_health, retry_socket_connect=retry_socket_connect)
        _FOLLOWING.add(self)

    def cut(self) -> bool:
        """Reset the socket as a node that went away would: a command waiting on it fails as a lost connection, and
        the next connect asks the Sentinels. False when not connected. Reads redis-py's `_writer`, held by
        tests/infra/test_primarywatch.py."""
        writer = self._writer
        if writer is None:
            return False
        writer.transport.abort()
        return True

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().read_response(*args, **kwargs)
        except redis_errors.ResponseError as error:
            if not str(error).startswith(NO_REPLICAS):
                raise
            await self.disconnect()
            raise redis_errors.ConnectionError("the primary has no replica in sync (NOREPLICAS)") from error


_FOLLOWING: weakref.WeakSet[FollowingConnection] = weakref.WeakSet()  # every one this process has connected


def cut_connections_to(address: tuple[str, int]) -> int:
    """Cut every connection of this process to `address`, a primary the Sentinels have replaced
    (`infra/primarywatch.py`); how many were cut."""
    return sum(connection.cut() for connection in list(_FOLLOWING) if (connection.host, connection.port) == address)


class FollowingPool(SentinelConnectionPool):
    """The Sentinel-backed pool of one client, which closes its connections to the Sentinels with its own (a pool
    also drops its idle connections when the primary moves: the Sentinels' are opened again when next asked)."""

    async def disconnect(self, inuse_connections: bool = True) -> None:
        await super().disconnect(inuse_connections)
        for sentinel in self.sentinel_manager.sentinels:
            await sentinel.connection_pool.disconnect()

    async def get_master_address(self) -> Any:
        """The primary's address; when no Sentinel names one, a reason that names no client (redis-py's own quotes
        each Sentinel client's repr, a password among its fields)."""
        try:
            return await super().get_master_address()  # type: ignore[no-untyped-call]
        except MasterNotFoundError:
            asked = len(self.sentinel_manager.sentinels)
            raise MasterNotFoundError(
                f"none of the {asked} Sentinels names a primary {self.service_name!r} (check VALKEY_SENTINELS, "
                "VALKEY_PRIMARY_NAME and VALKEY_SENTINEL_PASSWORD, and that the Sentinels run)"
            ) from None


def parse_sentinels(text: str) -> tuple[tuple[str, int], ...]:
    """`host:port` entries, comma separated (blanks around them allowed), as (host, port); ValueError names the
    entry that is not one. An IPv6 address may be written in brackets: `[::1]:26379`."""
    found: list[tuple[str, int]] = []
    for entry in (part.strip() for part in text.split(",")):
        host, _, port = entry.rpartition(":")
        host = host.removeprefix("[").removesuffix("]")
        if not host or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
            raise ValueError(f"{entry!r} is not host:port (a port from 1 to 65535)")
        found.append((host, int(port)))
    return tuple(dict.fromkeys(found))  # one named twice is asked once


def database_of(url: str) -> int:
    """The database number a URL selects (`/N`, or `?db=N` for a socket), 0 when it names none."""
    parts = urlsplit(url)
    path_db = parts.path.strip("/") if parts.scheme != "unix" else ""
    query_db = next((value for key, _, value in (p.partition("=") for p in parts.query.split("&")) if key == "db"), "")
    text = path_db or query_db
    return int(text) if text.isascii() and text.isdigit() else 0


@dataclass(frozen=True)
class StoreAddress:
    """The store one component talks to, with the secrets to reach it (hold it in memory; show it with `shown`)."""

    url: str = DEFAULT_VALKEY_URL
    password: str | None = None
    sentinels: tuple[tuple[str, int], ...] = ()
    primary_name: str = DEFAULT_PRIMARY_NAME
    sentinel_password: str | None = None

    @property
    def username(self) -> str | None:
        """The store user the URL names (`redis://pi-worker@host/0`; with Sentinels too), None: the default user."""
        return unquote(urlsplit(self.url).username or "") or None

    @property
    def replicated(self) -> bool:
        """Whether the primary is found through Sentinels (so acknowledged writes wait for a replica)."""
        return bool(self.sentinels)

    def shown(self) -> str:
        """The address as a log line may carry it: no password, no socket path."""
        if not self.replicated:
            return shown(self.url)
        listed = ",".join(f"{host}:{port}" for host, port in self.sentinels)
        return f"sentinel://{listed}/{self.primary_name}/{database_of(self.url)}"

    def fleet_id(self) -> str:
        """A short name for the fleet this address means, the same from every host: labels its containers."""
        if not self.replicated:
            return fleet_id(self.url)
        named = f"{self.primary_name}/{database_of(self.url)}/{sorted(self.sentinels)}"
        return hashlib.sha256(named.encode()).hexdigest()[:12]

    def _sentinel(self, timeout_s: float) -> Sentinel:
        asked = {"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s}
        if self.sentinel_password:
            asked["password"] = self.sentinel_password  # type: ignore[assignment]
        return Sentinel(list(self.sentinels), sentinel_kwargs=asked)  # type: ignore[no-untyped-call]

    def _primary_pool(self, timeout_s: float | None, **options: object) -> FollowingPool:
        sentinel = self._sentinel(timeout_s or OP_TIMEOUT_S)
        connection = {"db": database_of(self.url), "password": self.password or None, "is_master": True, **options}
        connection["username"] = self.username
        connection["connection_class"] = FollowingConnection
        if timeout_s is not None:
            connection |= {"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s}
        return FollowingPool(self.primary_name, sentinel, **connection)  # type: ignore[no-untyped-call]

    def client(self, timeout_s: float = OP_TIMEOUT_S) -> aioredis.Redis:
        """A client that answers or fails within timeout_s, raw bytes (peers may write anything), no retries:
        callers bound and retry each round trip themselves."""
        if not self.replicated:
            return connect(self.url, self.password, timeout_s)
        pool = self._primary_pool(timeout_s, retry=Retry(NoBackoff(), 0), health_check_interval=0)
        return StoreClient.from_pool(pool)

    def queue_connection(self, *, single: bool = False) -> str | aioredis.Redis:
        """What a BullMQ Queue or Worker is opened with: the URL (with its password) for a plain store, as before;
        for a replicated one a client of its own (BullMQ closes what it is given) that follows the primary and
        decodes replies as BullMQ expects. `single`: one connection for every command, so a `WAIT` after an add
        counts that add (a Worker needs a pool: its blocking pop would hold the one).

        No retries inside the client: redis-py retries a lost connection on the address it had, so a client that
        retries keeps dialling the dead primary for the whole of its retries before it asks the Sentinels again.
        Failing at once, the next command (the pickup's next try, within a second; the forge's redelivery) asks
        them and reaches the new primary."""
        if not self.replicated:
            return with_password(self.url, self.password)
        pool = self._primary_pool(None, decode_responses=True, retry=Retry(NoBackoff(), 0))
        client = aioredis.Redis(connection_pool=pool, single_connection_client=single)
        client.auto_close_connection_pool = True  # the client owns its pool, as `from_pool` has it
        return client


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
            self._sentinel = self.store._sentinel(OP_TIMEOUT_S)
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
            self._sentinel = self.store._sentinel(OP_TIMEOUT_S)
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


def _named(
    url: str, password: str | None, listed: str, primary_name: str | None, sentinel_password: str | None
) -> StoreAddress:
    """The address from the variables' values, however they were read: no Sentinels listed is a plain store."""
    listed = listed.strip()
    return StoreAddress(
        url=url,
        password=password or None,
        sentinels=parse_sentinels(listed) if listed else (),
        primary_name=primary_name or DEFAULT_PRIMARY_NAME,
        sentinel_password=sentinel_password or None,
    )


def store_of(settings: Any) -> StoreAddress:
    """The store a worker's or receiver's checked settings name (their `valkey_*` values)."""

    def revealed(secret: Any) -> str | None:
        return secret.get_secret_value() if secret is not None else None

    return _named(
        settings.valkey_url,
        revealed(settings.valkey_password),
        settings.valkey_sentinels,
        settings.valkey_primary_name,
        revealed(settings.valkey_sentinel_password),
    )


def store_environ(store: StoreAddress) -> dict[str, str]:
    """The variables `store_from_environ` reads back as this store: for a child process (`pi-dispatch audit`),
    whose command line must never carry a password."""
    named = {"VALKEY_URL": store.url, "VALKEY_PASSWORD": store.password, "VALKEY_PRIMARY_NAME": store.primary_name,
             "VALKEY_SENTINELS": ",".join(f"{host}:{port}" for host, port in store.sentinels),
             "VALKEY_SENTINEL_PASSWORD": store.sentinel_password}  # fmt: skip
    return {name: value for name, value in named.items() if value}


def store_from_environ(environ: Mapping[str, str] = os.environ, url: str | None = None) -> StoreAddress:
    """The store the operator's environment names (the same variables the worker's env file sets); `url` is a
    `--valkey-url` given on the command line. ValueError names a malformed VALKEY_SENTINELS."""
    return _named(
        url or environ.get("VALKEY_URL") or DEFAULT_VALKEY_URL,
        environ.get("VALKEY_PASSWORD"),
        environ.get("VALKEY_SENTINELS", ""),
        environ.get("VALKEY_PRIMARY_NAME"),
        environ.get("VALKEY_SENTINEL_PASSWORD"),
    )
