"""One error for an outage (`infra/valkey.StoreUnavailable`), against a real redis-server: what the store's clients
and `bounded` raise when it is away, slow or full, and what they do not (a command it refuses, a bug of ours)."""

from __future__ import annotations

import asyncio

import pytest
from redis import exceptions as redis_errors

from pi_dispatch.demo.store import free_port
from pi_dispatch.infra.valkey import STORE_FAULTS, StoreUnavailable, bounded, connect, describe, outages_named


@pytest.mark.redis
async def test_an_outage_is_one_error_and_a_refused_command_is_not_one(valkey_url: str) -> None:
    away = connect(f"redis://127.0.0.1:{free_port()}", timeout_s=0.5)
    with pytest.raises(StoreUnavailable) as refused:  # nothing listens there
        await away.ping()
    assert isinstance(refused.value, redis_errors.ConnectionError) and "ConnectionError" in describe(refused.value)
    with pytest.raises(StoreUnavailable):
        await away.pipeline().ping().execute()
    await away.aclose()

    client = connect(valkey_url)
    try:
        await client.set("a-string", "x")
        with pytest.raises(redis_errors.ResponseError) as wrong:  # a key of another type: the store answers
            await client.hgetall("a-string")
        assert not isinstance(wrong.value, StoreUnavailable) and isinstance(wrong.value, STORE_FAULTS)
        with pytest.raises(StoreUnavailable) as slow:  # a deadline passed is an outage, and a TimeoutError
            await bounded(asyncio.sleep(5), 0.05)
        assert isinstance(slow.value, TimeoutError)
        with pytest.raises(TypeError), outages_named():  # a bug stays a bug
            raise TypeError("ours")
        await client.config_set("maxmemory", 1)
        try:
            with pytest.raises(StoreUnavailable) as full:
                await client.set("more", "x" * 1000)
            assert full.value.full and isinstance(full.value, redis_errors.OutOfMemoryError)
        finally:
            await client.config_set("maxmemory", 0)
    finally:
        await client.delete("a-string")
        await client.aclose()
