"""The Sentinel transport of a replicated store: connections that follow the primary the Sentinels name, even
one that reconnects on its own, and give up on a primary cut off from its replicas.

Where the store is, and how a client is built, is `infra/store.py`; what is asked of the Sentinels about a write
or a lock is `infra/storeprobes.py`.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, Final

from redis import exceptions as redis_errors
from redis.asyncio.sentinel import MasterNotFoundError, Sentinel, SentinelConnectionPool, SentinelManagedConnection

if TYPE_CHECKING:
    from pi_dispatch.infra.store import StoreAddress

NO_REPLICAS: Final = "NOREPLICAS"


def sentinel_of(store: StoreAddress, timeout_s: float) -> Sentinel:
    """The Sentinels a store names, each asked within `timeout_s` with the Sentinels' own password."""
    asked = {"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s}
    if store.sentinel_password:
        asked["password"] = store.sentinel_password  # type: ignore[assignment]
    return Sentinel(list(store.sentinels), sentinel_kwargs=asked)  # type: ignore[no-untyped-call]


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
