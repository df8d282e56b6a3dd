"""Dollar windows in the store, as current Node hosts keep them (upstream-limits §3.6): a job's cost cap, in integer
micro-dollars, is held in each window of each ledger that applies to it (`budget:usd`, `budget:usd:s:<hash16>`,
`budget:usd:mdl:<hash16>`) before its container starts, and settled after it ends.

A ledger's windows are held by one script: each INCRBY the amount (the expiry set by the hold that made the key); a
window that goes past its cap refuses, and every window of that ledger is given back at once, the refusing one
included (unlike the job-count rule), with the ledgers held before it. A hold remembers its keys, so it settles into
the windows it was taken in whatever the clock says then. Settling moves each key by `settled - reserved`, never
recreates a key that expired, and clamps at zero.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, cast

from pi_dispatch.core.budget import WINDOW_TTL_S, Window, WindowCaps, window_key
from pi_dispatch.fleet.budgets import GIVE_BACK
from pi_dispatch.infra.valkey import OP_TIMEOUT_S, STORE_FAULTS, bounded

if TYPE_CHECKING:
    import redis.asyncio as aioredis

USD_PREFIX: Final = "budget:usd"

# KEYS: a ledger's windows. ARGV: the amount, then each window's cap and TTL. {0} once held in every window, else
# {position of the refusing window, its count with this hold}, everything given back.
HOLD: Final = """
local amount = tonumber(ARGV[1])
for index, key in ipairs(KEYS) do
  local held = redis.call('INCRBY', key, amount)
  if held == amount then redis.call('EXPIRE', key, ARGV[index * 2 + 1]) end
  if held > tonumber(ARGV[index * 2]) then
    for back = 1, index do redis.call('DECRBY', KEYS[back], amount) end
    return {index, held}
  end
end
return {0, 0}
"""
# KEYS: one window. ARGV: the delta. {0, total}; {1, 0} when the key is gone (left gone); {2, 0} when clamped at 0.
SETTLE: Final = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {1, 0} end
local total = redis.call('INCRBY', KEYS[1], ARGV[1])
if total < 0 then redis.call('INCRBY', KEYS[1], -total); return {2, 0} end
return {0, total}
"""


@dataclass(frozen=True)
class DollarLedger:
    prefix: str  # USD_PREFIX, or `budget:usd:s:<hash16>`, `budget:usd:mdl:<hash16>`
    caps: WindowCaps  # in micro-dollars


@dataclass
class DollarHold:
    """What a job holds: the amount, and each ledger's keys as they were when it was taken."""

    amount: int
    ledgers: list[tuple[str, list[str]]] = field(default_factory=list)

    @property
    def keys(self) -> list[str]:
        return [key for _, keys in self.ledgers for key in keys]


@dataclass(frozen=True)
class DollarRefusal:
    ledger: str
    window: Window
    reserved: int  # the refusing window's count with this hold
    cap: int


async def hold_dollars(
    client: aioredis.Redis, ledgers: Sequence[DollarLedger], amount: int, now_ms: int
) -> DollarHold | DollarRefusal:
    """Hold `amount` micro-dollars in every window of every ledger, or the first window with no room (everything
    given back). An amount of 0 holds nothing. A fault gives back what was held, then raises."""
    hold = DollarHold(amount)
    if amount <= 0:
        return hold
    for ledger in ledgers:
        windows = [(window, window_key(ledger.prefix, window, now_ms), cap) for window, cap in ledger.caps.active()]
        if not windows:
            continue
        limits = [str(value) for window, _, cap in windows for value in (cap, WINDOW_TTL_S[window])]
        keys = [key for _, key, _ in windows]
        try:
            reply = await bounded(client.eval(HOLD, len(keys), *keys, str(amount), *limits), OP_TIMEOUT_S)
            at, held = cast("list[int]", reply)
        except STORE_FAULTS:
            await release_quietly(client, hold)
            raise
        if int(at):
            await release_quietly(client, hold)
            window, _, cap = windows[int(at) - 1]
            return DollarRefusal(ledger.prefix, window, int(held), cap)
        hold.ledgers.append((ledger.prefix, keys))
    return hold


async def release_quietly(client: aioredis.Redis, hold: DollarHold) -> None:
    """Give a hold back whole (no container ran); a store that refuses leaves it to the windows' end."""
    if hold.keys:
        with contextlib.suppress(*STORE_FAULTS):
            await bounded(client.eval(GIVE_BACK, len(hold.keys), *hold.keys, str(hold.amount)), OP_TIMEOUT_S)


async def settle_key(client: aioredis.Redis, key: str, delta: int) -> tuple[int, int]:
    """Move one window by `delta`: (0, its total), (1, 0) when the key is gone, (2, 0) when clamped at zero."""
    outcome, total = cast("list[int]", await bounded(client.eval(SETTLE, 1, key, str(delta)), OP_TIMEOUT_S))
    return int(outcome), int(total)
