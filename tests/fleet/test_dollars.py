"""Dollar windows against a real redis-server, with the reference's vectors (upstream-limits §3.8,
`dollar-budget.test.mjs`, NOW = 2026-10-07T12:00:00Z)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import redis.asyncio as aioredis

from pi_dispatch.core.budget import Window, WindowCaps
from pi_dispatch.fleet.dollars import USD_PREFIX, DollarHold, DollarLedger, DollarRefusal, hold_dollars, settle_key

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
    assert refused == DollarRefusal(USD_PREFIX, Window.WEEK, 51 * USD, 50 * USD)
    assert await client.get(DAY) == b"0" and await client.get(WEEK) == b"49000000" and await client.exists(MONTH) == 0


async def test_five_holds_fill_a_day_exactly_and_a_sixth_micro_is_refused(client: aioredis.Redis) -> None:
    holds = [await hold_dollars(client, [DEPLOYMENT], 2 * USD, NOW) for _ in range(5)]
    assert all(isinstance(hold, DollarHold) for hold in holds)
    assert isinstance(await hold_dollars(client, [DEPLOYMENT], 1, NOW), DollarRefusal)
    assert await client.get(DAY) == b"10000000"


async def test_a_later_ledgers_refusal_gives_the_earlier_ones_back(client: aioredis.Redis) -> None:
    model = DollarLedger("budget:usd:mdl:da5f158f5abee1de", WindowCaps(day=1 * USD))
    refused = await hold_dollars(client, [DEPLOYMENT, model], 2 * USD, NOW)
    assert isinstance(refused, DollarRefusal) and refused.ledger == model.prefix
    assert [await client.get(key) for key in (DAY, WEEK, MONTH)] == [b"0"] * 3
    assert await client.get("budget:usd:mdl:da5f158f5abee1de:2026-10-07") == b"0"


async def test_settling_moves_each_key_never_recreates_one_and_clamps_at_zero(client: aioredis.Redis) -> None:
    hold = await hold_dollars(client, [DEPLOYMENT], 2 * USD, NOW)
    assert isinstance(hold, DollarHold)
    assert await settle_key(client, MONTH, 350_000 - 2 * USD) == (0, 350_000)
    await client.delete(DAY)
    assert await settle_key(client, DAY, -1_650_000) == (1, 0) and await client.exists(DAY) == 0
    await client.set(WEEK, 300_000)
    assert await settle_key(client, WEEK, -1_700_000) == (2, 0) and await client.get(WEEK) == b"0"
    assert 0 < await client.ttl(MONTH) <= 3_456_000  # the expiry is kept


async def test_an_amount_of_zero_holds_nothing(client: aioredis.Redis) -> None:
    hold = await hold_dollars(client, [DEPLOYMENT], 0, NOW)
    assert isinstance(hold, DollarHold) and hold.keys == [] and await client.exists(DAY) == 0
