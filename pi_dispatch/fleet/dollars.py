"""Dollar windows in the store, as current Node hosts keep them (upstream-limits §3.6): a job's cost cap, in integer
micro-dollars, is held in each window of each ledger that applies to it (`budget:usd`, `budget:usd:s:<hash16>`,
`budget:usd:mdl:<hash16>`) before its container starts, and settled after it ends.

A hold is one script over every window of every ledger: each INCRBY the amount (the expiry set by the hold that made
the key); a window that goes past its cap refuses, and every window held so far is given back at once, the refusing
one included (unlike the job-count rule). A hold remembers its keys, so it settles into the windows it was taken in
whatever the clock says then. Settling moves each key by `settled - reserved`, never recreates a key that expired,
and clamps at zero.

Beyond the reference, a hold is written, in the same script, where the fleet can find it should its worker die
before settling it: `budget:usd:open` (its id `<worker>#<jobId>#<attempt>` scored by the instant its lease ends: the
longest its container can run, plus a margin) and `budget:usd:open:data` (its amount and keys). Settling removes it
in the same script as it moves the windows. A hold whose lease has ended, or that a restarted worker finds its own,
is settled at the floor (the whole hold kept, as for any run whose cost is not known) and removed: no hold is open
longer than its lease, and each one is settled once.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, cast

from pi_dispatch.core.budget import WINDOW_TTL_S, Window, window_key
from pi_dispatch.core.dollarplan import USD_PREFIX, DollarLedger
from pi_dispatch.infra.valkey import OP_TIMEOUT_S, bounded

if TYPE_CHECKING:
    import redis.asyncio as aioredis

OPEN_HOLDS: Final = f"{USD_PREFIX}:open"  # this port's: hold id -> when its lease ends (epoch ms)
OPEN_HOLD_DATA: Final = f"{USD_PREFIX}:open:data"  # this port's: hold id -> {"amount", "keys"}
SWEEP_BATCH: Final = 100  # holds settled by one sweep at most; the next beat takes the rest

# KEYS: every window, then OPEN_HOLDS and OPEN_HOLD_DATA. ARGV: the amount, the number of windows, the hold's id,
# its lease's end and its data, then each window's cap and TTL. {0, 0} once held in every window (and the hold
# written), else {position of the refusing window, its count with this hold}, every window given back.
HOLD: Final = """
local amount, n = tonumber(ARGV[1]), tonumber(ARGV[2])
for index = 1, n do
  local held = redis.call('INCRBY', KEYS[index], amount)
  if held == amount then redis.call('EXPIRE', KEYS[index], ARGV[index * 2 + 5]) end
  if held > tonumber(ARGV[index * 2 + 4]) then
    for back = 1, index do redis.call('DECRBY', KEYS[back], amount) end
    return {index, held}
  end
end
redis.call('ZADD', KEYS[n + 1], ARGV[4], ARGV[3])
redis.call('HSET', KEYS[n + 2], ARGV[3], ARGV[5])
return {0, 0}
"""
# KEYS: OPEN_HOLDS, OPEN_HOLD_DATA, then the windows. ARGV: the hold's id, then each window's delta. Each window:
# 0 moved (or a delta of 0), 1 gone (left gone), 2 clamped at 0; the hold is no longer open. A hold already settled
# (by a sweep) moves nothing: {-1}.
SETTLE: Final = """
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return {-1} end
redis.call('HDEL', KEYS[2], ARGV[1])
local outcomes = {}
for index = 3, #KEYS do
  local delta, outcome = tonumber(ARGV[index - 1]), 0
  if delta ~= 0 then
    if redis.call('EXISTS', KEYS[index]) == 0 then outcome = 1
    else
      local total = redis.call('INCRBY', KEYS[index], delta)
      if total < 0 then redis.call('INCRBY', KEYS[index], -total); outcome = 2 end
    end
  end
  outcomes[#outcomes + 1] = outcome
end
return outcomes
"""
# KEYS: OPEN_HOLDS, OPEN_HOLD_DATA. ARGV: the instant (epoch ms), then ids to take whatever their lease (a restarted
# worker's own). Takes (removes) up to SWEEP_BATCH holds whose lease has ended and each named one: {id, data, ...}.
TAKE: Final = """
local taken = {}
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, SWEEP_BATCH)
for index = 2, #ARGV do ids[#ids + 1] = ARGV[index] end
for _, id in ipairs(ids) do
  if redis.call('ZREM', KEYS[1], id) == 1 then
    taken[#taken + 1] = id
    taken[#taken + 1] = redis.call('HGET', KEYS[2], id) or ''
    redis.call('HDEL', KEYS[2], id)
  end
end
return taken
""".replace("SWEEP_BATCH", str(SWEEP_BATCH))


@dataclass
class DollarHold:
    """What a job holds: the amount, its id in the open holds, and each ledger's keys as they were when it was
    taken."""

    amount: int
    hold_id: str = ""
    ledgers: list[tuple[DollarLedger, list[str]]] = field(default_factory=list)

    @property
    def keys(self) -> list[str]:
        return [key for _, keys in self.ledgers for key in keys]


@dataclass(frozen=True)
class DollarRefusal:
    ledger: DollarLedger
    window: Window
    reserved: int  # the refusing window's count with this hold
    cap: int


async def hold_dollars(
    client: aioredis.Redis,
    ledgers: Sequence[DollarLedger],
    amount: int,
    now_ms: int,
    *,
    hold_id: str = "",
    lease_ms: int = 0,
) -> DollarHold | DollarRefusal:
    """Hold `amount` micro-dollars in every window of every ledger (one script, so a fault holds nothing), or the
    first window with no room (everything given back). An amount of 0, or no window, holds nothing."""
    windows = [
        (ledger, window, window_key(ledger.prefix, window, now_ms), cap)
        for ledger in ledgers
        for window, cap in ledger.caps.active()
    ]
    if amount <= 0 or not windows:
        return DollarHold(amount)
    hold = DollarHold(amount, hold_id or f"anonymous#{now_ms}")
    for ledger in ledgers:
        keys = [key for owner, _, key, _ in windows if owner is ledger]
        if keys:
            hold.ledgers.append((ledger, keys))
    data = json.dumps({"amount": amount, "keys": hold.keys}, separators=(",", ":"))
    limits = [str(value) for _, window, _, cap in windows for value in (cap, WINDOW_TTL_S[window])]
    keys = [*hold.keys, OPEN_HOLDS, OPEN_HOLD_DATA]
    argv = [str(amount), str(len(windows)), hold.hold_id, str(now_ms + lease_ms), data, *limits]
    at, held = cast("list[int]", await bounded(client.eval(HOLD, len(keys), *keys, *argv), OP_TIMEOUT_S))
    if int(at):
        ledger, window, _, cap = windows[int(at) - 1]
        return DollarRefusal(ledger, window, int(held), cap)
    return hold


async def settle(client: aioredis.Redis, hold: DollarHold, settled: Sequence[int]) -> list[int] | None:
    """Settle each of the hold's ledgers to its amount (`settled`, one per ledger) and close the hold, in one
    script: each window's outcome (0 moved, 1 gone, 2 clamped), or None when a sweep had settled it already."""
    deltas = [str(amount - hold.amount) for (_, keys), amount in zip(hold.ledgers, settled, strict=True) for _ in keys]
    keys = [OPEN_HOLDS, OPEN_HOLD_DATA, *hold.keys]
    reply = cast("list[int]", await bounded(client.eval(SETTLE, len(keys), *keys, hold.hold_id, *deltas), OP_TIMEOUT_S))
    return None if reply[:1] == [-1] else [int(outcome) for outcome in reply]


async def release(client: aioredis.Redis, hold: DollarHold) -> list[int] | None:
    """Give a hold back whole: no container ran."""
    return await settle(client, hold, [0] * len(hold.ledgers))


@dataclass(frozen=True)
class OpenHold:
    """A hold taken from the open holds to be settled at the floor: its id, amount and keys."""

    hold_id: str
    amount: int
    keys: tuple[str, ...]


async def take_open_holds(client: aioredis.Redis, now_ms: int, own: Sequence[str] = ()) -> list[OpenHold]:
    """The open holds whose lease has ended (up to SWEEP_BATCH), and those of `own`, each taken once fleet-wide."""
    reply = cast(
        "list[bytes]", await bounded(client.eval(TAKE, 2, OPEN_HOLDS, OPEN_HOLD_DATA, str(now_ms), *own), OP_TIMEOUT_S)
    )
    taken = []
    for raw_id, raw in zip(reply[::2], reply[1::2], strict=True):
        try:
            data = json.loads(raw or b"{}")
        except ValueError:
            data = {}
        amount = data.get("amount") if isinstance(data, dict) else None
        keys = data.get("keys") if isinstance(data, dict) else None
        keys = tuple(str(key) for key in keys) if isinstance(keys, list) else ()
        taken.append(OpenHold(raw_id.decode(errors="replace"), amount if isinstance(amount, int) else 0, keys))
    return taken


async def own_open_holds(client: aioredis.Redis, worker: str) -> list[str]:
    """The ids of the open holds a worker of this name took (what it finds at boot, its earlier run dead)."""
    found: list[str] = []
    async for member, _ in client.zscan_iter(OPEN_HOLDS, match=f"{_glob(worker)}#*", count=500):
        found.append(member.decode(errors="replace") if isinstance(member, bytes) else str(member))
    return found


def _glob(text: str) -> str:
    return "".join(f"\\{char}" if char in "*?[]\\" else char for char in text)
