"""The store's epoch: the replication id of the primary a client writes to.

A replica promoted to primary takes a new replication id (so does a store that starts again without its data), so
what was granted under one epoch is not trusted under the next: a failover may have lost a lease and granted it to
another meanwhile. A holder notes the epoch when its lease is granted, and gives the lease up for the rest of its
turn once the epoch it reads differs (`fleet/rehome.py`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pi_dispatch.infra.valkey import OP_TIMEOUT_S, bounded

if TYPE_CHECKING:
    import redis.asyncio as aioredis


def epoch_of(replication: object) -> str | None:
    """The epoch in an `INFO replication` answer, None when it holds none."""
    value = replication.get("master_replid") if isinstance(replication, dict) else None
    return str(value) if value else None


async def store_epoch(client: aioredis.Redis, timeout_s: float = OP_TIMEOUT_S) -> str | None:
    """The epoch of the store this client writes to now."""
    return epoch_of(await bounded(client.info("replication"), timeout_s))
