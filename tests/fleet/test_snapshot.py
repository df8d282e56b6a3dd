"""The registry's snapshot against a real redis-server: one elected reader per beat, one GET for everyone else."""

from __future__ import annotations

import json

import pytest
import redis.asyncio as aioredis

from pi_dispatch.core.keys import DRAINED_HOSTS, HOST_SNAPSHOT, HOST_SNAPSHOT_LEASE, REHOME_SILENT
from pi_dispatch.core.routing import RouteTable
from pi_dispatch.fleet.registry import HostRegistry
from pi_dispatch.fleet.snapshot import MAX_AGE_MS, FleetView, fleet_view, parse_snapshot, read_drained

pytestmark = [pytest.mark.redis]
NOW = 1_800_000_000_000


async def commands(client: aioredis.Redis) -> int:
    return int((await client.info("stats"))["total_commands_processed"])


async def test_one_reader_refreshes_the_snapshot_and_the_others_read_it_with_one_command(
    client: aioredis.Redis,
) -> None:
    rows = [HostRegistry(client, f"host{number}", now=lambda: NOW) for number in range(40)]
    for number, row in enumerate(rows):
        await row.start({"routes": "true", "caps": "s:prod" if number % 2 else "", "secret": "not kept"})
    first = await fleet_view(client, now=lambda: NOW + 1_000)
    assert isinstance(first, FleetView) and first.direct and len(first.live.hosts) == 40
    stored = json.loads(await client.get(HOST_SNAPSHOT))
    assert stored["at"] == NOW + 1_000 and "secret" not in stored["rows"][0]  # the routing fields only
    before = await commands(client)
    later = await fleet_view(client, now=lambda: NOW + 5_000)
    assert await commands(client) - before == 3  # GET and SMEMBERS in one round trip (and INFO), whatever the size
    assert isinstance(later, FleetView) and not later.direct and later.age_ms == 4_000
    assert [host["name"] for host in later.live.hosts] == [host["name"] for host in first.live.hosts]
    assert later.live.hosts[1]["caps"] == "s:prod" and later.live.hosts[1]["staleMs"] == 1_000  # as of the read
    for row in rows:
        await row.close()


async def test_a_stale_snapshot_is_refreshed_by_the_lease_winner_only(client: aioredis.Redis) -> None:
    registry = HostRegistry(client, "mini1", now=lambda: NOW)
    await registry.start({"routes": "true", "caps": ""})
    await fleet_view(client, now=lambda: NOW)
    await client.delete(HOST_SNAPSHOT_LEASE)
    refreshed = await fleet_view(client, now=lambda: NOW + 20_000)  # older than a beat: this reader wins the lease
    assert isinstance(refreshed, FleetView) and refreshed.direct
    await client.set(HOST_SNAPSHOT, json.dumps({"at": NOW, "rows": []}))
    held = await fleet_view(client, now=lambda: NOW + 20_000)  # stale, but another reader holds the lease
    assert isinstance(held, FleetView) and not held.direct and held.live.hosts == []
    await client.delete(HOST_SNAPSHOT_LEASE)
    await client.set(HOST_SNAPSHOT_LEASE, "another")
    await client.set(HOST_SNAPSHOT, json.dumps({"at": NOW - MAX_AGE_MS - 1, "rows": []}))
    too_old = await fleet_view(client, now=lambda: NOW)  # too old to use: read directly, the lease left alone
    assert isinstance(too_old, FleetView) and too_old.direct and [h["name"] for h in too_old.live.hosts] == ["mini1"]
    await registry.close()


async def test_a_host_whose_row_is_gone_is_silent_for_re_homing(client: aioredis.Redis) -> None:
    await client.sadd("host:live", "gone")
    await fleet_view(client, now=lambda: NOW)
    assert await client.zscore(REHOME_SILENT, "gone") == NOW and not await client.sismember("host:live", "gone")
    registry = HostRegistry(client, "leaving", now=lambda: NOW + 1)
    await registry.start({})
    await registry.close()  # a worker that stops says so: its queue is looked at unless it is back
    assert await client.zscore(REHOME_SILENT, "leaving") == NOW + 1


@pytest.mark.parametrize(
    "raw",
    [None, b"not json", b"[]", b'{"at": "x", "rows": []}', b'{"at": 1, "rows": {}}', json.dumps({"at": NOW + 5})],
)
def test_a_snapshot_that_cannot_be_used_is_none(raw: bytes | str | None) -> None:
    assert parse_snapshot(raw, NOW) is None


def test_hostile_rows_in_a_snapshot_are_refused_as_a_direct_read_refuses_them() -> None:
    rows = [{"name": "ok", "beatAt": str(NOW)}, {"name": "../x", "beatAt": "1"}, {"name": 3}, "row"]
    parsed = parse_snapshot(json.dumps({"at": NOW, "rows": rows}), NOW + 10)
    assert parsed is not None
    live, age = parsed
    assert [host["name"] for host in live.hosts] == ["ok"] and age == 10
    assert [row.member for row in live.invalid] == ["../x"]


async def test_a_drain_set_that_is_no_set_leaves_the_rows_word_and_routing_goes_on(client: aioredis.Redis) -> None:
    registry = HostRegistry(client, "mini1", now=lambda: NOW)
    await registry.start({"routes": "true", "caps": "", "draining": "true"})
    await client.set(DRAINED_HOSTS, "written by hand")  # WRONGTYPE for every set command
    view = await fleet_view(client, now=lambda: NOW + 1_000)
    assert isinstance(view, FleetView) and [row["draining"] for row in view.live.hosts] == ["true"]
    assert await read_drained(client) is None
    await registry.close()


async def test_a_snapshot_carries_why_a_host_is_unhealthy_so_routers_reading_it_leave_the_host_out(
    client: aioredis.Redis,
) -> None:
    hosts = [HostRegistry(client, name, now=lambda: NOW) for name in ("sick", "well", "other")]
    for host in hosts:
        caps = "" if host.name == "other" else "s:prod"
        unhealthy = "PI_JOBS_DIR is not writable (EROFS)" if host.name == "sick" else ""
        await host.start({"routes": "true", "caps": caps, "unhealthy": unhealthy})
    assert isinstance(await fleet_view(client, now=lambda: NOW + 1_000), FleetView)  # published
    read = await fleet_view(client, now=lambda: NOW + 2_000)
    assert isinstance(read, FleetView) and not read.direct
    table = RouteTable.from_hosts(read.live.hosts)
    assert {table.route(["s:prod"], f"gh-d-{number}") for number in range(20)} == {"well"}
    for host in hosts:
        await host.close()
