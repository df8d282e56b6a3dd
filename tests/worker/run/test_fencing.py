"""A running job's lock fence on a real redis-server: it renews a lock whose holder's renewal lapsed (as a full store
makes BullMQ's lapse), and fences at once when the lock is gone or taken, or in time when it cannot be read."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from redis.exceptions import OutOfMemoryError

from pi_dispatch.infra.valkey import connect
from pi_dispatch.testing.services import RedisServer
from pi_dispatch.worker.run.fencing import LockFence

pytestmark = pytest.mark.redis
LOCK, STALLED = "bull:q:j1:lock", "bull:q:stalled"


async def held(url: str) -> Any:
    client = connect(url)
    await client.set(LOCK, "tok", px=1_000)
    await client.sadd(STALLED, "j1")  # as BullMQ's stalled check leaves it: a renewal takes it out
    return client


async def test_under_a_full_store_the_fence_keeps_the_lock_bullmq_cannot_renew(private_redis: RedisServer) -> None:
    client = await held(private_redis.url)
    fence = LockFence(client, "q", "j1", "tok", 1_000)
    watching = asyncio.create_task(fence.watch())
    try:
        await client.config_set("maxmemory", 1)  # every write that may grow it is refused from now on
        with pytest.raises(OutOfMemoryError):
            await client.set(LOCK, "tok", px=1_000)  # BullMQ's renewal
        await asyncio.sleep(3.5)  # three and a half lock lives
        assert not fence.lost.is_set()
        assert await client.get(LOCK) == b"tok" and await client.pttl(LOCK) > 0
        assert not await client.sismember(STALLED, "j1")  # so no stalled check takes the job from its holder
        await client.config_set("maxmemory", 0)
        await client.set(LOCK, "another", px=1_000)  # the lock went to another holder after all
        await asyncio.wait_for(watching, 1)
        assert fence.reason == "lock-taken"
    finally:
        watching.cancel()
        await client.config_set("maxmemory", 0)
        await client.aclose()


async def test_a_lock_gone_fences_at_once_and_one_unreadable_before_it_could_expire(
    private_redis: RedisServer,
) -> None:
    client = await held(private_redis.url)
    try:
        fence = LockFence(client, "q", "j1", "tok", 1_000)
        watching = asyncio.create_task(fence.watch())
        await asyncio.sleep(0.3)
        await client.delete(LOCK)
        await asyncio.wait_for(watching, 0.5)
        assert fence.reason == "lock-gone"
        await client.set(LOCK, "tok", px=1_000)
        fence = LockFence(client, "q", "j1", "tok", 1_000)
        watching = asyncio.create_task(fence.watch())
        await asyncio.sleep(0.3)
        private_redis.stop()
        stopped = time.monotonic()
        await asyncio.wait_for(watching, 2)
        assert fence.reason == "lock-unproven" and time.monotonic() - stopped < 1.0  # before the lock could lapse
    finally:
        await client.aclose()
