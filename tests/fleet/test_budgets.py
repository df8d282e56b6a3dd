"""The limit windows and the fleet lease against a real redis-server, with the reference's vectors (upstream-limits
§3.8, §4.6): counts, set-once expiries, narrowest-first give-back, the token counter, the lease's probing."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import redis.asyncio as aioredis

from pi_dispatch.core.budget import WindowCaps, WindowState, scope_ledger, scope_slot_prefix
from pi_dispatch.fleet.budgets import Ledger, add_tokens, refund, reserve, tokens_spent
from pi_dispatch.fleet.lease import FleetLease, probe_order

pytestmark = [pytest.mark.redis]
NOW = int(datetime(2026, 7, 16, 10, tzinfo=UTC).timestamp() * 1000)
DAY, WEEK, MONTH = "budget:2026-07-16", "budget:w:2026-07-13", "budget:m:2026-07"


def fleet(day: int | None = None, week: int | None = None, month: int | None = None, pct: int | None = None) -> Ledger:
    return Ledger("budget", WindowCaps(day, week, month), pct)


def scoped(scope: str, day: int) -> Ledger:
    return Ledger(scope_ledger(scope), WindowCaps(day=day), scope=scope)


async def test_five_starts_against_a_day_of_three(client: aioredis.Redis) -> None:
    verdicts = [await reserve(client, [fleet(day=3)], NOW) for _ in range(5)]
    assert [reservation.refused_by is None for reservation in verdicts] == [True, True, True, False, False]
    assert [reservation.verdict.state for reservation in verdicts[3:]] == [WindowState.OVER] * 2
    assert await client.get(DAY) == b"5"  # a refusal keeps its count, as the reference's does
    assert await client.ttl(DAY) == 172_800 and await client.ttl(WEEK) == -2  # no week cap: no week key


async def test_each_active_window_is_counted_and_its_expiry_set_once(client: aioredis.Redis) -> None:
    await reserve(client, [fleet(100, 100, 100)], NOW)
    await client.expire(DAY, 50)  # a later start must not push the window's end forward
    await reserve(client, [fleet(100, 100, 100)], NOW)
    assert [await client.get(key) for key in (DAY, WEEK, MONTH)] == [b"2"] * 3
    assert await client.ttl(DAY) <= 50 and await client.ttl(WEEK) == 777_600 and await client.ttl(MONTH) == 3_456_000


async def test_the_first_window_over_its_cap_names_the_refusal(client: aioredis.Redis) -> None:
    await client.set(WEEK, 5)
    refused = await reserve(client, [fleet(100, 5, 100)], NOW)
    assert refused.verdict.window == "week" and refused.verdict.state is WindowState.OVER
    await client.flushdb()
    await client.set(DAY, 8)
    assert (await reserve(client, [fleet(day=10, pct=80)], NOW)).verdict.state is WindowState.SOFT_HOLD
    await client.set(DAY, 6)
    assert (await reserve(client, [fleet(day=10, pct=80)], NOW)).refused_by is None


async def test_a_refund_gives_back_every_window_and_never_recreates_one(client: aioredis.Redis) -> None:
    first = await reserve(client, [fleet(3, 3, 3)], NOW)
    await reserve(client, [fleet(3, 3, 3)], NOW)
    await refund(client, first)
    assert [await client.get(key) for key in (DAY, WEEK, MONTH)] == [b"1"] * 3
    await client.delete(DAY)
    await refund(client, first)
    assert await client.exists(DAY) == 0


async def test_a_scopes_refusal_never_touches_the_fleets_windows(client: aioredis.Redis) -> None:
    scope = scoped("org/repo", day=1)
    await client.set("budget:s:57b681c5cf8efdc2:2026-07-16", 1)
    refused = await reserve(client, [scope, fleet(day=10)], NOW)
    assert refused.refused_by == scope and not refused.holds("budget")
    assert await client.get("budget:s:57b681c5cf8efdc2:2026-07-16") == b"2" and await client.exists(DAY) == 0


async def test_the_fleets_refusal_gives_the_scope_back(client: aioredis.Redis) -> None:
    await client.set(DAY, 10)
    refused = await reserve(client, [scoped("org/repo", day=5), fleet(day=10)], NOW)
    assert refused.refused_by is not None and refused.refused_by.prefix == "budget" and refused.holds("budget")
    assert await client.get("budget:s:57b681c5cf8efdc2:2026-07-16") == b"0" and await client.get(DAY) == b"11"


async def test_the_token_counter_adds_and_sets_its_expiry_once(client: aioredis.Redis) -> None:
    assert await tokens_spent(client, NOW) == 0
    assert await add_tokens(client, 400, NOW) == 400 and await client.ttl("budget:t:2026-07-16") == 172_800
    await client.expire("budget:t:2026-07-16", 60)
    assert await add_tokens(client, 600, NOW) == 1000 and await client.ttl("budget:t:2026-07-16") <= 60
    assert await tokens_spent(client, NOW) == 1000


async def test_a_lease_is_taken_once_and_released_only_by_its_holder(client: aioredis.Redis) -> None:
    prefix = scope_slot_prefix("forgejo:acme/web")
    mini1, mini2 = FleetLease(client, "mini1"), FleetLease(client, "mini2")
    held = await mini1.acquire(prefix, 1, "job-a", 60_000)
    assert held is not None and held.key == "slot:s:51a39c48b08666c4:0"
    assert await client.get(held.key) == b"mini1#job-a" and 59_000 < await client.pttl(held.key) <= 60_000
    assert await mini2.acquire(prefix, 1, "job-b", 60_000) is None
    assert await mini1.release(held) == 1
    taken = await mini2.acquire(prefix, 1, "job-b", 60_000)
    assert taken is not None and await mini1.release(held) == 0  # a second release leaves mini2's slot alone
    assert await client.get(held.key) == b"mini2#job-b"


async def test_jobs_probe_from_their_hash_and_fill_distinct_slots(client: aioredis.Redis) -> None:
    assert [probe_order("p:", 4, job)[0] for job in ("a", "b", "c", "d", "job-a", "gh-abc-123")] == [
        "p:1", "p:2", "p:3", "p:0", "p:1", "p:3",
    ]  # fmt: skip
    lease = FleetLease(client, "mini1")
    taken = [await lease.acquire("p:", 4, job, 60_000) for job in ("a", "b", "c", "d")]
    assert sorted(str(held.key) for held in taken if held is not None) == ["p:0", "p:1", "p:2", "p:3"]
    assert await lease.acquire("p:", 4, "e", 60_000) is None


async def test_the_boot_sweep_deletes_only_this_workers_slots(client: aioredis.Redis) -> None:
    values = {"s:0": "mini1#old-job", "s:1": "mini2#live-job", "s:2": "xmini1#j", "s:3": "mini10#j", "s:4": "mini1#x"}
    for key, value in values.items():
        await client.set(key, value)
    await client.hset("s:5", mapping={"a": "b"})  # type: ignore[misc]  # not a slot: left alone, not an error
    assert await FleetLease(client, "mini1").sweep([*values, "s:5", "s:6"]) == 2
    assert sorted(key.decode() for key in await client.keys("s:*")) == ["s:1", "s:2", "s:3", "s:5"]
