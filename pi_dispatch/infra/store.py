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
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import unquote, urlsplit

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from pi_dispatch.infra.valkey import (
    DEFAULT_VALKEY_URL,
    OP_TIMEOUT_S,
    StoreClient,
    connect,
    fleet_id,
    shown,
    with_password,
)

if TYPE_CHECKING:
    from pi_dispatch.infra.sentinel import FollowingPool

DEFAULT_PRIMARY_NAME: Final = "pi-dispatch"
STORE_VARIABLES: Final = (  # every variable that names the store
    "VALKEY_URL",
    "VALKEY_PASSWORD",
    "VALKEY_SENTINELS",
    "VALKEY_PRIMARY_NAME",
    "VALKEY_SENTINEL_PASSWORD",
)


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

    def _primary_pool(self, timeout_s: float | None, **options: object) -> FollowingPool:
        from pi_dispatch.infra.sentinel import FollowingConnection, FollowingPool, sentinel_of  # replicated only

        sentinel = sentinel_of(self, timeout_s or OP_TIMEOUT_S)
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
    named = {
        "VALKEY_URL": store.url,
        "VALKEY_PASSWORD": store.password,
        "VALKEY_PRIMARY_NAME": store.primary_name,
        "VALKEY_SENTINELS": ",".join(f"{host}:{port}" for host, port in store.sentinels),
        "VALKEY_SENTINEL_PASSWORD": store.sentinel_password,
    }
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
