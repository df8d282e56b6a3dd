"""The host registry on a real Valkey (upstream-vectors §3.3) and the fleet queue names (§4)."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis.asyncio as aioredis

from pi_dispatch.core.capabilities import capability_tokens, serialize_caps
from pi_dispatch.core.keys import queue_of_meta_key
from pi_dispatch.core.routing import route_forge_job
from pi_dispatch.fleet.registry import HOST_BEAT_MS, HOST_TTL_MS, HostRegistry, LiveHosts, Unreachable, read_live_hosts
from pi_dispatch.infra.events import Recorder
from pi_dispatch.infra.valkey import connect

NOW = 1788091200000


def decoded(row: dict[bytes, bytes]) -> dict[str, str]:
    return {key.decode(): value.decode() for key, value in row.items()}


@pytest.mark.redis
async def test_start_writes_the_row_and_membership(client: aioredis.Redis) -> None:
    registry = HostRegistry(client, "mini1", now=lambda: NOW)
    assert await registry.start({"version": "1.7.0", "concurrency": 3})
    row = decoded(await client.hgetall("host:h:mini1"))
    assert row == {"version": "1.7.0", "concurrency": "3", "startedAt": str(NOW), "name": "mini1", "beatAt": str(NOW)}
    assert await client.smembers("host:live") == {b"mini1"}
    assert HOST_TTL_MS - 2_000 < await client.pttl("host:h:mini1") <= HOST_TTL_MS
    assert HOST_TTL_MS // HOST_BEAT_MS == 6
    await registry.close()


@pytest.mark.redis
async def test_publish_is_one_round_trip_and_refreshes_ttl(valkey_url: str, client: aioredis.Redis) -> None:
    own = connect(valkey_url)
    registry = HostRegistry(own, "mini1")
    await registry.start({"version": "1.8.0", "imageDigest": "sha256:abc"})
    await client.pexpire("host:h:mini1", 1_000)
    before = await client.info("stats")
    assert await registry.publish()
    after = await client.info("stats")
    # MULTI, DEL, HSET, PEXPIRE, SADD, EXEC, all in one write: plus the INFO counted in `after`.
    assert int(after["total_commands_processed"]) - int(before["total_commands_processed"]) == 7
    assert await client.pttl("host:h:mini1") > 80_000
    row = decoded(await client.hgetall("host:h:mini1"))
    assert row["version"] == "1.8.0" and row["imageDigest"] == "sha256:abc"
    await registry.close()
    await own.aclose()


@pytest.mark.redis
async def test_thunks_are_reevaluated_every_beat(client: aioredis.Redis) -> None:
    profiles = {"prod": "/opt/vault/read.sh"}
    slots = [3]
    registry = HostRegistry(client, "mini1")
    await registry.start(
        {
            "caps": lambda: serialize_caps(capability_tokens(profiles)),
            "concurrency": lambda: slots[0],
            "broken": lambda: 1 / 0,
        }
    )
    assert (await client.hget("host:h:mini1", "caps")) == b"s:prod"
    profiles["staging"] = "/opt/vault/stage.sh"
    slots[0] = 5
    await registry.publish()
    row = decoded(await client.hgetall("host:h:mini1"))
    assert (row["caps"], row["concurrency"], row["broken"]) == ("s:prod,s:staging", "5", "")
    await registry.close()


@pytest.mark.redis
async def test_path_like_values_are_dropped_and_logged_once(client: aioredis.Redis) -> None:
    log = Recorder()
    registry = HostRegistry(client, "mini1", log=log)
    await registry.start(
        {
            "version": "1.7.0",
            "imageDigest": "sha256:abc",
            "tz": "Europe/Amsterdam",
            "logsDir": "/tmp/pi-dispatch/logs",
            "winPath": "C:\\Users\\rob\\deploy",
            "relativeish": "some\\thing",
        }
    )
    await registry.publish()
    row = decoded(await client.hgetall("host:h:mini1"))
    assert row["tz"] == "Europe/Amsterdam" and row["imageDigest"] == "sha256:abc"
    assert not {"logsDir", "winPath", "relativeish"} & row.keys()
    assert sorted(fields["field"] for event, fields in log.events if event == "host_registry_field_refused") == [
        "logsDir",
        "relativeish",
        "winPath",
    ]
    await registry.close()


async def test_unreachable_is_logged_once_and_never_raises() -> None:
    log = Recorder()
    dead = connect("redis://127.0.0.1:1/0", timeout_s=0.2)
    registry = HostRegistry(dead, "mini1", log=log, timeout_s=0.2)
    assert await registry.start({"version": "1"}) is False
    assert await registry.publish() is False
    assert await registry.publish() is False
    assert log.events == [("host_registry_unreachable", log.events[0][1])]
    await registry.close()
    await dead.aclose()


@pytest.mark.redis
async def test_a_healthy_registry_never_logs_restored(client: aioredis.Redis) -> None:
    log = Recorder()
    registry = HostRegistry(client, "mini1", log=log)
    await registry.start({})
    await registry.publish()
    await registry.close()
    assert "host_registry_restored" not in log.names()


@pytest.mark.redis
async def test_close_removes_row_and_member_and_is_idempotent(client: aioredis.Redis) -> None:
    registry = HostRegistry(client, "mini1")
    await registry.start({})
    await registry.close()
    await registry.close()
    assert await client.exists("host:h:mini1") == 0
    assert await client.smembers("host:live") == set()
    assert await registry.publish() is False
    assert await client.exists("host:h:mini1") == 0


@pytest.mark.redis
async def test_a_beat_in_flight_cannot_resurrect_a_closed_row(valkey_url: str, client: aioredis.Redis) -> None:
    own = connect(valkey_url, timeout_s=5)
    await own.ping()
    registry = HostRegistry(own, "mini1", timeout_s=5)
    await registry.start({})
    await client.execute_command("CLIENT", "PAUSE", "300", "WRITE")
    in_flight = asyncio.ensure_future(registry.publish())
    await asyncio.sleep(0.05)
    await registry.close()
    await in_flight
    await asyncio.sleep(0.4)
    assert await client.exists("host:h:mini1") == 0
    assert await client.smembers("host:live") == set()
    await own.aclose()


@pytest.mark.redis
async def test_hung_server_start_and_close_stay_bounded(valkey_url: str, client: aioredis.Redis) -> None:
    log = Recorder()
    hung = connect(valkey_url, timeout_s=30)
    await hung.ping()  # an established connection that then stops answering
    await client.execute_command("CLIENT", "PAUSE", "20000", "WRITE")
    try:
        started = time.monotonic()
        registry = HostRegistry(hung, "mini1", log=log, timeout_s=0.2)
        await registry.start({})
        await registry.close()
        # Unbounded, this would wait out the 20 s pause; this machine's timers are coarse, hence the margin.
        assert time.monotonic() - started < 10.0
        assert log.names() == ["host_registry_unreachable"]
    finally:
        await client.execute_command("CLIENT", "UNPAUSE")
        await hung.aclose()


@pytest.mark.redis
async def test_reader_prunes_ghosts_and_derives_staleness(client: aioredis.Redis) -> None:
    registry = HostRegistry(client, "mini1", now=lambda: NOW)
    await registry.start({})
    await client.sadd("host:live", "ghost")
    result = await read_live_hosts(client, now=lambda: NOW + 5_000)
    assert isinstance(result, LiveHosts)
    assert [host["name"] for host in result.hosts] == ["mini1"]
    assert result.hosts[0]["staleMs"] == 5_000
    assert await client.smembers("host:live") == {b"mini1"}
    await registry.close()


@pytest.mark.redis
async def test_reader_prune_false_keeps_the_ghost(client: aioredis.Redis) -> None:
    await client.sadd("host:live", "ghost")
    assert await read_live_hosts(client, prune=False) == LiveHosts([], ghosts=["ghost"])
    assert await client.smembers("host:live") == {b"ghost"}
    await read_live_hosts(client, now=lambda: NOW)
    assert await client.smembers("host:live") == set()
    assert await client.zscore("rehome:silent", "ghost") == NOW  # its queue is re-homing's to look at from now


@pytest.mark.redis
async def test_reader_empty_and_unreachable_are_different_answers(client: aioredis.Redis) -> None:
    assert await read_live_hosts(client) == LiveHosts([])
    dead = connect("redis://127.0.0.1:1/0", timeout_s=0.2)
    result = await read_live_hosts(dead, timeout_s=0.2)
    await dead.aclose()
    assert isinstance(result, Unreachable) and result.reason


@pytest.mark.redis
async def test_reader_clamps_a_clock_ahead_and_keeps_unknown_fields(client: aioredis.Redis) -> None:
    registry = HostRegistry(client, "mini1", now=lambda: NOW + 60_000)
    await registry.start({"jobs": "[]", "fpUsd": "abcd"})
    result = await read_live_hosts(client, now=lambda: NOW)
    assert isinstance(result, LiveHosts)
    assert result.hosts[0]["staleMs"] == 0
    assert result.hosts[0]["fpUsd"] == "abcd"
    await registry.close()


@pytest.mark.redis
@pytest.mark.parametrize("beat", [None, "", "  ", "yesterday"])
async def test_an_undatable_peer_row_is_never_live(client: aioredis.Redis, beat: str | None) -> None:
    peer = {"name": "mini1", "caps": "s:prod", "routes": "true"}
    if beat is not None:
        peer["beatAt"] = beat
    await client.hset("host:h:mini1", mapping=peer)
    await client.hset("host:h:mini2", mapping={"name": "mini2", "caps": "", "routes": "true", "beatAt": str(NOW)})
    await client.sadd("host:live", "mini1", "mini2")
    result = await read_live_hosts(client, now=lambda: NOW)
    assert isinstance(result, LiveHosts)
    assert "staleMs" not in result.hosts[0]
    assert route_forge_job(result.hosts, ["s:prod"], "gh-d-1") is None


@pytest.mark.redis
async def test_reader_uses_member_when_the_row_has_no_name(client: aioredis.Redis) -> None:
    await client.hset("host:h:lonely", mapping={"beatAt": str(NOW), "caps": "w:ci"})
    await client.sadd("host:live", "lonely")
    result = await read_live_hosts(client, now=lambda: NOW)
    assert isinstance(result, LiveHosts) and result.hosts[0]["name"] == "lonely"


def test_queue_of_meta_key() -> None:
    keys = ["bull:pi-jobs@mini2:meta", "bull:pi-jobs@mini1:meta", "bull:pi-jobs@a:b:meta", "bull:pi-jobs@ok:meta"]
    assert sorted(q for q in map(queue_of_meta_key, keys) if q) == ["pi-jobs@mini1", "pi-jobs@mini2", "pi-jobs@ok"]


@pytest.mark.redis
async def test_a_fleet_sized_read_keeps_every_row_and_refuses_what_is_no_hash(client: aioredis.Redis) -> None:
    """More rows than one script call reads (KEYS_PER_SCRIPT), a row whose bytes are not UTF-8, an entry that is no
    hash and a ghost, all in one read: what the pipeline of HGETALLs it replaced answered."""
    from pi_dispatch.infra.valkey import KEYS_PER_SCRIPT

    count = KEYS_PER_SCRIPT + 7
    pipe = client.pipeline(transaction=False)
    for index in range(count):
        pipe.hset(f"host:h:w{index:05d}", mapping={"name": f"w{index:05d}", "beatAt": str(NOW), "caps": "s:prod"})
    pipe.hset("host:h:odd", mapping={"name": "odd", "beatAt": str(NOW), "note": b'\xff\xfe"quoted"\n'})
    pipe.set("host:h:text", "not a row")
    pipe.sadd("host:live", *[f"w{index:05d}" for index in range(count)], "odd", "text", "ghost")
    await pipe.execute()
    result = await read_live_hosts(client, now=lambda: NOW)
    assert isinstance(result, LiveHosts)
    assert [host["name"] for host in result.hosts] == ["odd", *[f"w{index:05d}" for index in range(count)]]
    assert result.hosts[0]["note"] == '\ufffd\ufffd"quoted"\n' and result.hosts[-1]["caps"] == "s:prod"
    assert [(row.member, row.reason) for row in result.invalid] == [("text", "its entry is not a hash")]
    assert result.ghosts == ["ghost"]
