"""Dollar windows against a real redis-server, with the reference's vectors (upstream-limits §3.8,
`dollar-budget.test.mjs`, NOW = 2026-10-07T12:00:00Z)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import redis.asyncio as aioredis

from pi_dispatch.core.budget import Window, WindowCaps
from pi_dispatch.core.dollarplan import USD_PREFIX, DollarLedger
from pi_dispatch.fleet.dollars import (
    OPEN_HOLD_DATA,
    OPEN_HOLDS,
    DollarHold,
    DollarRefusal,
    hold_dollars,
    own_open_holds,
    release,
    settle,
    take_open_holds,
)

pytestmark = [pytest.mark.redis]
NOW = int(datetime(2026, 10, 7, 12, tzinfo=UTC).timestamp() * 1000)
USD = 1_000_000
DAY, WEEK, MONTH = "budget:usd:2026-10-07", "budget:usd:w:2026-10-05", "budget:usd:m:2026-10"
DEPLOYMENT = DollarLedger(USD_PREFIX, WindowCaps(10 * USD, 50 * USD, 100 * USD))


async def test_a_hold_lands_in_every_window_with_its_expiry(client: aioredis.Redis) -> None:
    hold = await hold_dollars(client, [DEPLOYMENT], 2 * USD, NOW)
    assert isinstance(hold, DollarHold) and hold.keys == [DAY, WEEK, MONTH]
    assert [await client.get(key) for key in hold.keys] == [b"2000000"] * 3
    assert [await client.ttl(key) for key in hold.keys] == [172_800, 777_600, 3_456_000]


async def test_a_full_window_refuses_and_every_key_is_given_back(client: aioredis.Redis) -> None:
    await client.set(WEEK, 49 * USD)
    refused = await hold_dollars(client, [DEPLOYMENT], 2 * USD, NOW)
    assert refused == DollarRefusal(DEPLOYMENT, Window.WEEK, 51 * USD, 50 * USD)
    assert await client.get(DAY) == b"0" and await client.get(WEEK) == b"49000000" and await client.exists(MONTH) == 0
    assert await client.exists(OPEN_HOLDS, OPEN_HOLD_DATA) == 0  # a refused hold is not open


async def test_five_holds_fill_a_day_exactly_and_a_sixth_micro_is_refused(client: aioredis.Redis) -> None:
    holds = [await hold_dollars(client, [DEPLOYMENT], 2 * USD, NOW) for _ in range(5)]
    assert all(isinstance(hold, DollarHold) for hold in holds)
    assert isinstance(await hold_dollars(client, [DEPLOYMENT], 1, NOW), DollarRefusal)
    assert await client.get(DAY) == b"10000000"


async def test_a_later_ledgers_refusal_gives_the_earlier_ones_back(client: aioredis.Redis) -> None:
    model = DollarLedger("budget:usd:mdl:da5f158f5abee1de", WindowCaps(day=1 * USD))
    refused = await hold_dollars(client, [DEPLOYMENT, model], 2 * USD, NOW)
    assert isinstance(refused, DollarRefusal) and refused.ledger == model
    assert [await client.get(key) for key in (DAY, WEEK, MONTH)] == [b"0"] * 3
    assert await client.get("budget:usd:mdl:da5f158f5abee1de:2026-10-07") == b"0"


async def test_settling_moves_each_key_never_recreates_one_and_clamps_at_zero(client: aioredis.Redis) -> None:
    hold = await hold_dollars(client, [DEPLOYMENT], 2 * USD, NOW, hold_id="mini1#j#1", lease_ms=60_000)
    assert isinstance(hold, DollarHold)
    assert await client.zscore(OPEN_HOLDS, "mini1#j#1") == NOW + 60_000
    await client.delete(DAY)
    await client.set(WEEK, 300_000)
    assert await settle(client, hold, [350_000]) == [1, 2, 0]
    assert await client.exists(DAY) == 0 and await client.get(WEEK) == b"0" and await client.get(MONTH) == b"350000"
    assert 0 < await client.ttl(MONTH) <= 3_456_000  # the expiry is kept
    assert await client.exists(OPEN_HOLDS, OPEN_HOLD_DATA) == 0
    assert await settle(client, hold, [0]) is None  # settled once: a second settle moves nothing
    assert await client.get(MONTH) == b"350000"


async def test_a_release_gives_the_whole_hold_back(client: aioredis.Redis) -> None:
    hold = await hold_dollars(client, [DEPLOYMENT], 2 * USD, NOW, hold_id="mini1#j#1")
    assert isinstance(hold, DollarHold) and await release(client, hold) == [0, 0, 0]
    assert [await client.get(key) for key in (DAY, WEEK, MONTH)] == [b"0"] * 3


async def test_open_holds_are_taken_once_when_their_lease_ends_or_by_their_worker(client: aioredis.Redis) -> None:
    for job, lease in (("a", 1_000), ("b", 600_000), ("c", 600_000)):
        held = await hold_dollars(client, [DEPLOYMENT], USD, NOW, hold_id=f"mini1#{job}#1", lease_ms=lease)
        assert isinstance(held, DollarHold)
    other = await hold_dollars(client, [DEPLOYMENT], USD, NOW, hold_id="mini10#d#1", lease_ms=600_000)
    assert isinstance(other, DollarHold)
    assert sorted(await own_open_holds(client, "mini1")) == ["mini1#a#1", "mini1#b#1", "mini1#c#1"]
    taken = await take_open_holds(client, NOW + 2_000)
    assert [(hold.hold_id, hold.amount, hold.keys) for hold in taken] == [("mini1#a#1", USD, (DAY, WEEK, MONTH))]
    assert await take_open_holds(client, NOW + 2_000) == []
    assert [hold.hold_id for hold in await take_open_holds(client, NOW, ["mini1#b#1", "mini1#a#1"])] == ["mini1#b#1"]
    assert await client.get(DAY) == b"4000000"  # settled at the floor: every window keeps what was held


async def test_an_amount_of_zero_holds_nothing(client: aioredis.Redis) -> None:
    hold = await hold_dollars(client, [DEPLOYMENT], 0, NOW)
    assert isinstance(hold, DollarHold) and hold.keys == [] and await client.exists(DAY) == 0
