"""The fleet's epoch against a real redis-server: written once, and a store that lost its data noticed once by each
process that reads it, the count of losses kept; `audit --live` reports the loss and whether persistence is on."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from pi_dispatch.audit.store import store_findings
from pi_dispatch.core.keys import FLEET_EPOCH
from pi_dispatch.fleet.storereset import EpochWatch, FleetEpoch
from pi_dispatch.fleet.storeview import read_store_state
from pi_dispatch.infra.events import Recorder

pytestmark = pytest.mark.redis


def clock(start: int = 1_800_000_000_000) -> list[int]:
    return [start]


async def test_the_epoch_is_written_once_and_a_lost_store_is_noticed_once_per_process(client: aioredis.Redis) -> None:
    now = clock()
    first, peer = Recorder(), Recorder()
    watch, other = EpochWatch(client, lambda: now[0], first), EpochWatch(client, lambda: now[0], peer)
    assert await watch.check() is False  # a fresh store: written, nothing lost that this process knew of
    written = FleetEpoch.read(await client.get(FLEET_EPOCH))
    assert written is not None and written.resets == 0 and written.resetAt is None and len(written.runId) == 40
    assert await other.check() is False and await watch.check() is False  # read, unchanged
    await client.flushdb()  # the store comes back without its data
    now[0] += 60_000
    assert await watch.check() is True  # noticed, and the epoch written again with the loss counted
    again = FleetEpoch.read(await client.get(FLEET_EPOCH))
    assert again is not None and (again.resets, again.resetAt) == (1, now[0])
    assert await watch.check() is False  # once
    assert await other.check() is True and await other.check() is False  # the peer found it rewritten: once too
    assert first.names().count("store_reset") == 1 and peer.names().count("store_reset") == 1
    assert first.events[-1][1] == {"runId": again.runId, "resets": 1}


async def test_a_foreign_value_reads_as_no_epoch(client: aioredis.Redis) -> None:
    await client.set(FLEET_EPOCH, b"\xff not json")
    assert FleetEpoch.read(await client.get(FLEET_EPOCH)) is None
    assert FleetEpoch.read('{"runId": "r", "since": 1, "resetAt": "soon"}') is None


async def test_the_audit_reports_a_recent_loss_and_a_store_that_keeps_nothing(client: aioredis.Redis) -> None:
    now = clock()
    watch = EpochWatch(client, lambda: now[0])
    await watch.check()
    await client.flushdb()
    await watch.check()
    state = await read_store_state(client, configuration=True)
    assert state.persistence == "off"  # the test store: --save "" and appendonly no
    assert "persistence off" in state.summary() and "lost its data 1x" in state.summary()
    codes = {finding.code for finding in store_findings(state, now[0] + 1_000)}
    assert {"store-reset", "store-not-persistent"} <= codes
    week_later = {finding.code for finding in store_findings(state, now[0] + 8 * 86_400_000)}
    assert "store-reset" not in week_later  # history by then
    await client.config_set("appendonly", "yes")
    try:
        assert (await read_store_state(client, configuration=True)).persistence == "aof"
    finally:
        await client.config_set("appendonly", "no")
