"""The fleet's limits as the store holds them now, for `pi-dispatch limits`, `top` and the metrics: each window of the
fleet's ledger and of each scope's, used against the caps this host runs with and when it starts again, the day's
tokens, and who holds each of a scope's fleet-wide slots. One round trip whatever the store holds: the keys are named
by the caps and the file, never searched for.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Final

from pi_dispatch.core.budget import (
    DEFAULT_DAILY_CAP,
    LIMITS_ROW_FIELD,
    Window,
    WindowCaps,
    read_limits_signature,
    scope_ledger,
    scope_slot_prefix,
    token_day_key,
    window_ends_ms,
    window_key,
)
from pi_dispatch.core.dollarplan import FPUSD_ROW_FIELD, USD_PREFIX, row_ledger, spend_groups
from pi_dispatch.core.keys import BUDGET_PREFIX
from pi_dispatch.core.money import format_micros
from pi_dispatch.core.scopedlimits import NO_CAPS, ScopedLimits
from pi_dispatch.fleet.dollars import OPEN_HOLDS
from pi_dispatch.infra.valkey import OP_TIMEOUT_S, bounded, reply_text, reply_whole

if TYPE_CHECKING:
    import redis.asyncio as aioredis

NEAR_SHARE: Final = 0.8  # a window this full is near its cap (the alert rule's threshold too)


@dataclass(frozen=True)
class WindowUse:
    ledger: str  # `budget`, `budget:s:<hash16>`, `budget:t` (the day's tokens), `budget:usd…` (micro-dollars)
    window: str
    key: str
    used: int
    cap: int | None
    resets_at_ms: int

    @property
    def near(self) -> bool:
        return self.cap is not None and self.used >= NEAR_SHARE * self.cap

    @property
    def dollars(self) -> bool:
        """Whether the window counts micro-dollars (else starts or tokens)."""
        return self.ledger == USD_PREFIX or self.ledger.startswith(f"{USD_PREFIX}:")

    def as_json(self) -> dict[str, object]:
        return {
            "ledger": self.ledger,
            "window": self.window,
            "key": self.key,
            "used": self.used,
            "cap": self.cap,
            "resetsAt": self.resets_at_ms,
            "near": self.near,
        }


@dataclass(frozen=True)
class ScopeUse:
    scope: str  # a repository as written, or `a folder` (a path is never shown)
    ledger: str
    windows: list[WindowUse]
    concurrent: int | None
    holders: list[str] = field(default_factory=list)  # `<worker>#<job id>` of each slot held

    def as_json(self) -> dict[str, object]:
        return {
            "scope": self.scope,
            "ledger": self.ledger,
            "windows": [use.as_json() for use in self.windows],
            "concurrent": self.concurrent,
            "held": self.holders,
        }


@dataclass(frozen=True)
class LimitsView:
    at_ms: int
    windows: list[WindowUse]
    scopes: list[ScopeUse]
    hosts: dict[str, dict[str, str] | None]  # each live host's limits as its row says them (None: says none)
    spend: dict[str, str | None] = field(default_factory=dict)  # each live host's `fpUsd` (None: says none)
    open_holds: int = 0  # dollar holds taken and not settled yet: runs under way, or left by a worker that died

    @property
    def differing(self) -> bool:
        said = {tuple(sorted(limits.items())) for limits in self.hosts.values() if limits is not None}
        return len(said) > 1

    @property
    def spend_differs(self) -> bool:
        """Whether live hosts cap dollars differently (`core/dollarplan.spend_groups`)."""
        return bool(spend_groups(self.spend))

    def as_json(self) -> dict[str, object]:
        return {
            "at": self.at_ms,
            "windows": [use.as_json() for use in self.windows],
            "scopes": [scope.as_json() for scope in self.scopes],
            "hosts": [{"name": name, "limits": limits} for name, limits in sorted(self.hosts.items())],
            "hostsDiffer": self.differing,
            "spend": [{"name": name, "fpUsd": fp} for name, fp in sorted(self.spend.items())],
            "spendDiffers": self.spend_differs,
            "openHolds": self.open_holds,
        }


def shown_scope(scope: str) -> str:
    return "a folder" if scope.startswith("/") else scope


async def read_limits(
    client: aioredis.Redis,
    caps: WindowCaps,
    token_cap: int | None,
    scoped: ScopedLimits,
    *,
    rows: Sequence[Mapping[str, Any]],
    now_ms: int,
    dollars: WindowCaps = NO_CAPS,
) -> LimitsView:
    """The windows' counts (dollars' too: the fleet's when capped, each dollar row's), the scopes' slot holders and
    the open dollar holds, in one round trip."""
    fleet = [
        (BUDGET_PREFIX, window, window_key(BUDGET_PREFIX, window, now_ms), cap) for window, cap in caps.by_window()
    ]
    if dollars.active():
        fleet += [
            (USD_PREFIX, window, window_key(USD_PREFIX, window, now_ms), cap) for window, cap in dollars.by_window()
        ]
    scope_keys = [
        (
            row,
            _keyed(scope_ledger(row.scope), row.caps, now_ms) + _keyed(row_ledger(row).prefix, row.dollars, now_ms),
            [f"{scope_slot_prefix(row.scope)}{index}" for index in range(row.concurrent or 0)],
        )
        for row in scoped.rows
    ]
    keys = [key for _, _, key, _ in fleet] + [token_day_key(now_ms)]
    keys += [key for _, windows, slots in scope_keys for key in [*(k for _, _, k, _ in windows), *slots]]
    pipe = client.pipeline(transaction=False)
    pipe.mget(keys)
    pipe.zcard(OPEN_HOLDS)
    values, open_holds = await bounded(pipe.execute(), OP_TIMEOUT_S)
    replies = iter(values)
    windows = [_use(counted, next(replies), now_ms) for counted in fleet]
    windows.append(_use((f"{BUDGET_PREFIX}:t", Window.DAY, token_day_key(now_ms), token_cap), next(replies), now_ms))
    scopes = []
    for row, scope_windows, slots in scope_keys:
        uses = [_use(counted, next(replies), now_ms) for counted in scope_windows]
        holders = [text for _ in slots if (text := reply_text(next(replies)))]
        scopes.append(ScopeUse(shown_scope(row.scope), scope_ledger(row.scope), uses, row.concurrent, holders))
    hosts = {str(row.get("name")): read_limits_signature(str(row.get(LIMITS_ROW_FIELD) or "")) for row in rows}
    spend = {str(row.get("name")): reply_text(row.get(FPUSD_ROW_FIELD)) or None for row in rows}
    return LimitsView(now_ms, windows, scopes, hosts, spend, int(open_holds or 0))


Counted = tuple[str, Window, str, int | None]  # a window's ledger, window, key and cap


def _keyed(ledger: str, caps: WindowCaps, now_ms: int) -> list[Counted]:
    return [(ledger, window, window_key(ledger, window, now_ms), cap) for window, cap in caps.active()]


def _use(counted: Counted, reply: object, now_ms: int) -> WindowUse:
    ledger, window, key, cap = counted
    used = reply_whole(reply)
    return WindowUse(ledger, str(window), key, max(0, used or 0), cap, window_ends_ms(window, now_ms))


def published_caps(rows: Sequence[Mapping[str, Any]]) -> tuple[WindowCaps, int | None]:
    """The caps the live hosts publish, for a reader without an env file (`top`): the most hosts' (the defaults when
    none publishes any)."""
    said = [found for row in rows if (found := read_limits_signature(str(row.get(LIMITS_ROW_FIELD) or "")))]
    if not said:
        return WindowCaps(DEFAULT_DAILY_CAP), None
    counted = Counter(tuple(sorted(limits.items())) for limits in said)  # linear: a fleet of thousands says a few
    common = dict(counted.most_common(1)[0][0])  # the first said of the most said, as a max over them would pick

    def whole(name: str) -> int | None:
        return int(common[name]) if common.get(name, "").isdigit() else None

    caps = WindowCaps.of(lambda spec: whole(spec.row_field))
    return replace(caps, day=caps.day or DEFAULT_DAILY_CAP), whole("tokens")


def limits_summary(view: LimitsView) -> str:
    """One line: each capped window's use, the day's tokens, whether hosts' caps differ."""
    said = [
        f"{use.window} {use.used}/{use.cap}" if use.cap is not None else f"{use.window} {use.used}"
        for use in view.windows
        if use.ledger == BUDGET_PREFIX
    ]
    tokens = next(use for use in view.windows if use.ledger == f"{BUDGET_PREFIX}:t")
    said.append(f"tokens {tokens.used}" + (f"/{tokens.cap}" if tokens.cap is not None else ""))
    said += [
        f"dollars {use.window} {money(use.used)}" + (f"/{money(use.cap)}" if use.cap is not None else "")
        for use in view.windows
        if use.ledger == USD_PREFIX
    ]
    near = [f"{use.ledger} {use.window}" for use in view.windows if use.near]
    differ = view.differing or view.spend_differs
    tail = (" · near the cap: " + ", ".join(near) if near else "") + (" · hosts' caps differ" if differ else "")
    return "limits: starts " + " · ".join(said) + tail


def money(micros: int) -> str:
    """Micro-dollars as an operator reads them: `$2.50`."""
    return f"${format_micros(micros)}"
