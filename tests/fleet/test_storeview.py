"""The store as the operator's reads show it, read from real stores: a single redis-server and a replicated one
behind three Sentinels; and what `audit --live` finds in each."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis.asyncio as aioredis

from pi_dispatch.audit.store import store_findings
from pi_dispatch.fleet.storeview import read_store_state
from pi_dispatch.infra.store import StoreAddress
from pi_dispatch.testing.replicated import ReplicatedStore

pytestmark = pytest.mark.redis
NOW = 1_800_000_000_000


async def test_a_single_store_is_a_primary_without_replicas_and_the_audit_says_so(client: aioredis.Redis) -> None:
    state = await read_store_state(client, configuration=True)
    assert (state.role, state.replicas, state.in_sync, state.eviction_policy) == ("master", (), 0, "noeviction")
    assert state.min_replicas_to_write == 0 and not state.promoted and state.unreadable is None
    assert "0/0 replicas in sync" in state.summary() and "eviction noeviction" in state.summary()
    assert [finding.code for finding in store_findings(state, NOW)] == ["store-not-persistent", "store-no-replica"]


async def test_an_evicting_policy_is_an_error(client: aioredis.Redis) -> None:
    await client.config_set("maxmemory-policy", "allkeys-lru")
    try:
        state = await read_store_state(client, configuration=True)
    finally:
        await client.config_set("maxmemory-policy", "noeviction")
    codes = [finding.code for finding in store_findings(state, NOW)]
    assert codes == ["store-not-persistent", "store-eviction", "store-no-replica"]
    assert store_findings(state, NOW)[1].severity == "error" and "allkeys-lru" in store_findings(state, NOW)[1].message


async def test_a_store_that_does_not_answer_says_why() -> None:
    gone = StoreAddress("redis://127.0.0.1:1/0").client(timeout_s=0.5)
    try:
        state = await read_store_state(gone, configuration=True)
    finally:
        await gone.aclose()
    assert state.unreadable is not None and state.summary().startswith("store: unreadable (")
    assert store_findings(state, NOW) == []  # the registry's own finding says the store is away


@pytest.fixture(scope="module")
def guarded() -> Iterator[ReplicatedStore]:
    with ReplicatedStore(min_replicas_to_write=1) as store:
        yield store


@pytest.mark.slow
async def test_a_replicated_store_shows_its_replicas_its_guard_and_the_sentinels_epoch(
    guarded: ReplicatedStore,
) -> None:
    address = guarded.address()
    client = address.client()
    try:
        state = await read_store_state(client, address, configuration=True)
    finally:
        await client.aclose()
    assert state.role == "master" and len(state.replicas) == 2 and state.in_sync == 2
    assert state.min_replicas_to_write == 1 and store_findings(state, NOW) == []
    assert state.failover is not None and state.failover.epoch == 0 and state.failover.primary_for_s is not None
    assert "2/2 replicas in sync" in state.summary() and "Sentinel epoch 0" in state.summary()
    unguarded = state.__class__(**{**state.__dict__, "min_replicas_to_write": 0})
    assert [finding.code for finding in store_findings(unguarded, NOW)] == ["store-writes-unguarded"]


@pytest.mark.redis
async def test_without_configuration_the_store_is_not_asked_for_it(client: aioredis.Redis) -> None:
    """What the fleet's own users read (`core/storeusers.py` refuses them CONFIG): INFO alone, never CONFIG GET."""
    before = await client.info("commandstats")
    state = await read_store_state(client)
    after = await client.info("commandstats")
    assert after.get("cmdstat_config|get") == before.get("cmdstat_config|get")
    assert state.unreadable is None and state.min_replicas_to_write is None and state.role == "master"
