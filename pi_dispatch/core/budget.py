"""The limit windows the fleet shares with Node hosts, keyed and judged as the reference does.

A ledger is a key prefix (`budget` for the fleet's own, `budget:s:<hash16>` for a scope's) with up to three UTC
windows: the day (`<prefix>:YYYY-MM-DD`), the week keyed by its Monday (`<prefix>:w:YYYY-MM-DD`) and the month
(`<prefix>:m:YYYY-MM`). Each is a counter of container starts whose expiry is set once, by the start that made it,
so traffic never pushes a window's end forward. The day's tokens are counted apart, in `budget:t:YYYY-MM-DD`.
Pure: the store's side is `fleet/budgets.py`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from enum import StrEnum
from typing import Final

from pi_dispatch.core.keys import BUDGET_PREFIX, SCOPE_SLOT_PREFIX


class Window(StrEnum):
    """A ledger's windows, in the order they are counted and judged."""

    DAY = "day"
    WEEK = "week"
    MONTH = "month"


@dataclass(frozen=True)
class WindowSpec:
    """One window, everything that names it: its key's lifetime, its settings, and its fields in the scoped-limits
    file and in the fleet's dollar policy. Every module that counts, shows or compares windows iterates `WINDOWS`."""

    window: Window
    ttl_s: int  # how long its key lives once made: past its own end, so a late reader still finds it
    cap_setting: str  # the settings field capping its container starts (PI_DAILY_CAP, ...)
    usd_setting: str  # the settings field capping its dollars (PI_DAILY_COST_USD, ...)
    usd_field: str  # a scoped-limits row's dollar cap (version 2)
    policy_field: str  # the fleet's dollar policy as `fpUsd` digests it (the reference's names)

    @property
    def row_field(self) -> str:
        """A scoped-limits row's cap on starts, and the window's name in a row's `limits`."""
        return str(self.window)


WINDOWS: Final = (
    WindowSpec(Window.DAY, 172_800, "daily_cap", "daily_cost_usd", "dayUsd", "dailyCostUsd"),
    WindowSpec(Window.WEEK, 777_600, "weekly_cap", "weekly_cost_usd", "weekUsd", "weeklyCostUsd"),
    WindowSpec(Window.MONTH, 3_456_000, "monthly_cap", "monthly_cost_usd", "monthUsd", "monthlyCostUsd"),
)
WINDOW_TTL_S: Final = {spec.window: spec.ttl_s for spec in WINDOWS}
TOKEN_DAY_TTL_S: Final = 172_800
DEFAULT_DAILY_CAP: Final = 25  # the reference's: a host that sets nothing still bounds its starts a day


def utc_day(at_ms: int) -> date:
    return datetime.fromtimestamp(at_ms / 1000, UTC).date()


def window_key(prefix: str, window: Window, at_ms: int) -> str:
    """The key counting `window` of the ledger `prefix` at the instant at_ms (UTC)."""
    day = utc_day(at_ms)
    if window is Window.DAY:
        return f"{prefix}:{day.isoformat()}"
    if window is Window.WEEK:
        return f"{prefix}:w:{(day - timedelta(days=day.weekday())).isoformat()}"
    return f"{prefix}:m:{day:%Y-%m}"


def window_ends_ms(window: Window, at_ms: int) -> int:
    """When the window holding at_ms ends (UTC midnight after its last day)."""
    day = utc_day(at_ms)
    if window is Window.DAY:
        end = day + timedelta(days=1)
    elif window is Window.WEEK:
        end = day + timedelta(days=7 - day.weekday())
    else:
        end = date(day.year + day.month // 12, day.month % 12 + 1, 1)
    return int(datetime(end.year, end.month, end.day, tzinfo=UTC).timestamp() * 1000)


def token_day_key(at_ms: int) -> str:
    """The day's token counter."""
    return f"{BUDGET_PREFIX}:t:{utc_day(at_ms).isoformat()}"


def tokens_counted(reported: int | None, verified: bool, token_cap: int, daily_cap: int) -> int:
    """What a run adds to the day's token counter: what its exit line reported when the worker could verify the
    line (signed with the key it handed the run); otherwise at least the run's share of the day, the token cap over
    the day's starts, since a line the job could forge or suppress would let it spend while counting nothing."""
    said = reported if reported is not None and reported > 0 else 0
    return said if verified else max(said, -(-token_cap // max(daily_cap, 1)))


def hash16(text: str) -> str:
    """The first 16 hex digits of SHA-256 over the UTF-8 text: how a scope is named in keys, never by itself."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def scope_ledger(scope: str) -> str:
    """The ledger prefix of a scoped-limits row, by its scope string."""
    return f"{BUDGET_PREFIX}:s:{hash16(scope)}"


def scope_slot_prefix(scope: str) -> str:
    """The prefix of a scope's fleet-wide concurrency leases (`slot:s:<hash16>:`, an index follows)."""
    return f"{SCOPE_SLOT_PREFIX}{hash16(scope)}:"


# This port's registry row field: the limits a host runs with, so hosts whose caps differ are seen (`limits`, audit)
LIMITS_ROW_FIELD: Final = "limits"
LIMITS_ROW_RE: Final = re.compile(r"[a-z]{1,16}=[0-9a-f]{0,16}(?:;[a-z]{1,16}=[0-9a-f]{0,16}){0,15}")


def limits_signature(caps: WindowCaps, soft_hold_pct: int | None, token_cap: int | None, files: str) -> str:
    """The row's `limits`: each cap (empty: none), then a digest of the limit files (`files`, empty: none)."""
    values = (*caps.values(), soft_hold_pct, token_cap)
    named = zip((*(spec.row_field for spec in WINDOWS), "hold", "tokens"), values, strict=True)
    return ";".join([*(f"{name}={value if value is not None else ''}" for name, value in named), f"files={files}"])


def read_limits_signature(text: str) -> dict[str, str] | None:
    """A row's `limits` as its fields, or None when it is not one."""
    if not LIMITS_ROW_RE.fullmatch(text):
        return None
    return dict(part.split("=", 1) for part in text.split(";"))


class WindowState(StrEnum):
    OK = "ok"
    SOFT_HOLD = "soft-hold"
    OVER = "over"


def window_state(reserved: int, cap: int, soft_hold_pct: int | None) -> WindowState:
    """How a window stands once this start is counted: past its cap, inside the hold band below it, or fine. A cap
    of 0 or less is always over (fails closed)."""
    if cap <= 0 or reserved > cap:
        return WindowState.OVER
    if soft_hold_pct is not None and reserved > cap * soft_hold_pct // 100:
        return WindowState.SOFT_HOLD
    return WindowState.OK


@dataclass(frozen=True)
class WindowCaps:
    """A ledger's caps; a window without one is neither counted nor keyed."""

    day: int | None = None
    week: int | None = None
    month: int | None = None

    @classmethod
    def of(cls, cap_of: Callable[[WindowSpec], int | None]) -> WindowCaps:
        """The caps `cap_of` reads for each window of `WINDOWS`."""
        return cls(*(cap_of(spec) for spec in WINDOWS))

    def values(self) -> tuple[int | None, ...]:
        """Each window's cap (None: none), in the order of `WINDOWS`."""
        return (self.day, self.week, self.month)

    def by_window(self) -> tuple[tuple[Window, int | None], ...]:
        return tuple(zip((spec.window for spec in WINDOWS), self.values(), strict=True))

    def active(self) -> tuple[tuple[Window, int], ...]:
        return tuple((window, cap) for window, cap in self.by_window() if cap is not None)


@dataclass(frozen=True)
class Verdict:
    """A ledger's judgement of one start: the worst state, and the first window in that state with its count."""

    state: WindowState
    window: Window | None = None
    reserved: int = 0
    cap: int = 0


def judge(caps: WindowCaps, counts: Mapping[Window, int], soft_hold_pct: int | None = None) -> Verdict:
    """The verdict on counts just taken in each active window (over before soft-hold; day, then week, then month)."""
    states = [
        (window, counts[window], cap, window_state(counts[window], cap, soft_hold_pct)) for window, cap in caps.active()
    ]
    for worst in (WindowState.OVER, WindowState.SOFT_HOLD):
        for window, reserved, cap, state in states:
            if state is worst:
                return Verdict(state, window, reserved, cap)
    return Verdict(WindowState.OK)
