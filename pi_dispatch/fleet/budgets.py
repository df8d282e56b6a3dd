"""The limit windows in the store (`core/budget.py` keys and judges them): counting a start in each ledger a job
falls under, narrowest first, giving back what a refusal leaves held, and the day's token counter.

A ledger's windows are counted by one script (INCR each, the expiry set by the start that made the key), so a start
costs one round trip a ledger. A refusal by a ledger gives back the ledgers counted before it, last first; the
refusing ledger keeps its count, as the reference's does ("refused still counts"). A give-back never recreates a key
that expired meanwhile (the reference's plain DECR would leave a -1 with no expiry behind).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, cast

from pi_dispatch.core.budget import (
    TOKEN_DAY_TTL_S,
    WINDOW_TTL_S,
    Verdict,
    Window,
    WindowCaps,
    WindowState,
    judge,
    token_day_key,
    window_key,
)
from pi_dispatch.infra.valkey import OP_TIMEOUT_S, STORE_FAULTS, bounded, reply_whole

if TYPE_CHECKING:
    import redis.asyncio as aioredis

# KEYS: a ledger's windows. ARGV: each one's TTL in seconds. Each count once this start is in it.
COUNT: Final = """
local counts = {}
for index, key in ipairs(KEYS) do
  local count = redis.call('INCR', key)
  if count == 1 then redis.call('EXPIRE', key, ARGV[index]) end
  counts[index] = count
end
return counts
"""
# KEYS: windows to give an amount back to (ARGV[1]: a start, or a dollar hold), where they still exist.
GIVE_BACK: Final = """
for _, key in ipairs(KEYS) do
  if redis.call('EXISTS', key) == 1 then redis.call('DECRBY', key, ARGV[1]) end
end
return #KEYS
"""
# KEYS: the day's token counter. ARGV: the run's tokens, the TTL. The day's total once they are in it.
ADD_TOKENS: Final = """
local total = redis.call('INCRBY', KEYS[1], ARGV[1])
if total == tonumber(ARGV[1]) then redis.call('EXPIRE', KEYS[1], ARGV[2]) end
return total
"""


@dataclass(frozen=True)
class Ledger:
    """Where a start is counted: the fleet's own (`budget`) or a scope's (`budget:s:<hash16>`), with its caps."""

    prefix: str
    caps: WindowCaps
    soft_hold_pct: int | None = None  # the fleet's own ledger alone has a hold band
    scope: str | None = None  # the row's scope, for a scope's ledger (never logged: it may be a folder)

    def keys(self, now_ms: int) -> list[tuple[Window, str]]:
        return [(window, window_key(self.prefix, window, now_ms)) for window, _ in self.caps.active()]


@dataclass
class Reservation:
    """The windows a job's start is counted in, and the ledger that refused it, if one did."""

    held: list[tuple[Ledger, list[str]]] = field(default_factory=list)
    refused_by: Ledger | None = None
    verdict: Verdict = field(default_factory=lambda: Verdict(WindowState.OK))
    started: bool = False  # its container started: the start counts, whatever the run's end

    def holds(self, prefix: str) -> bool:
        return any(ledger.prefix == prefix for ledger, _ in self.held)


async def _give_back(client: aioredis.Redis, held: Sequence[tuple[Ledger, list[str]]]) -> None:
    keys = [key for _, windows in reversed(held) for key in windows]
    if keys:
        await bounded(client.eval(GIVE_BACK, len(keys), *keys, "1"), OP_TIMEOUT_S)


async def reserve(client: aioredis.Redis, ledgers: Sequence[Ledger], now_ms: int) -> Reservation:
    """Count a start in each ledger, narrowest first, until one refuses: the ledgers before it are given back and
    it keeps its own count. A fault gives back what was counted whole, then raises."""
    reservation = Reservation()
    for ledger in ledgers:
        windows = ledger.keys(now_ms)
        if not windows:
            continue
        keys = [key for _, key in windows]
        ttls = [str(WINDOW_TTL_S[window]) for window, _ in windows]
        try:
            counts = await bounded(client.eval(COUNT, len(keys), *keys, *ttls), OP_TIMEOUT_S)
        except STORE_FAULTS:
            await _refund_quietly(client, reservation.held)
            raise
        verdict = judge(
            ledger.caps,
            dict(zip((window for window, _ in windows), map(int, counts), strict=True)),
            ledger.soft_hold_pct,
        )
        if verdict.state is not WindowState.OK:
            await _refund_quietly(client, reservation.held)
            return Reservation([(ledger, keys)], ledger, verdict)
        reservation.held.append((ledger, keys))
    return reservation


async def _refund_quietly(client: aioredis.Redis, held: Sequence[tuple[Ledger, list[str]]]) -> None:
    """Give back what a refusal or a fault leaves held; a give-back the store refuses is lost to the windows' end
    (they overcount by one, as a start that ran would)."""
    with contextlib.suppress(*STORE_FAULTS):
        await _give_back(client, held)


async def refund(client: aioredis.Redis, reservation: Reservation) -> None:
    """Give back every window a start was counted in: no container started, so none counts."""
    await _give_back(client, reservation.held)


async def tokens_spent(client: aioredis.Redis, now_ms: int) -> int:
    """The day's tokens so far."""
    value = await bounded(client.get(token_day_key(now_ms)), OP_TIMEOUT_S)
    return reply_whole(value) or 0  # not a count (written by something else): none, rather than refuse every job


async def add_tokens(client: aioredis.Redis, tokens: int, now_ms: int) -> int:
    """Add a run's tokens to the day's counter; the day's total."""
    key = token_day_key(now_ms)
    total = await bounded(client.eval(ADD_TOKENS, 1, key, str(tokens), str(TOKEN_DAY_TTL_S)), OP_TIMEOUT_S)
    return int(cast(Any, total))
