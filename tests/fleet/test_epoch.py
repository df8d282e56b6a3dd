"""The store's epoch, read from real stores: steady on one primary, another once a replica is promoted."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis.asyncio as aioredis

from pi_dispatch.fleet.epoch import epoch_of, store_epoch
from pi_dispatch.testing.replicated import ReplicatedStore

pytestmark = pytest.mark.redis


async def test_one_primary_keeps_its_epoch(client: aioredis.Redis) -> None:
    first = await store_epoch(client)
    await client.set(b"k", b"v")
    assert first is not None and len(first) == 40 and await store_epoch(client) == first
    assert epoch_of({}) is None and epoch_of("not an answer") is None


@pytest.mark.slow
async def test_a_promotion_gives_the_store_a_new_epoch() -> None:
    with ReplicatedStore() as store:
        client = store.address().client()
        try:
            before = await store_epoch(client)
            store.kill(store.primary())
            deadline, after = time.monotonic() + 90, None
            while after is None and time.monotonic() < deadline:
                try:
                    after = await store_epoch(client)
                except Exception:  # the store is failing over; asked again
                    await asyncio.sleep(0.1)
            assert before is not None and after is not None and after != before
        finally:
            await client.aclose()
