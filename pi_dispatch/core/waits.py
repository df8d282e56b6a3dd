"""The wait-for rules that need no process: exit-code verdicts, hold backoff, `after` instants. Pure.

A port of the reference's exit-code and wait-for helpers: a check exits 0 (go), 3 (hold), 2 (refuse)
or anything else (a hold that counts as a fault); a held job is re-checked on a cadence that doubles
every ten periods up to 15 minutes; an `after` instant must carry a zone and name a real day.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Final, Literal

from pi_dispatch.core.jscompat import date_parse
from pi_dispatch.core.names import is_profile_name
from pi_dispatch.core.reasons import ExitCode, Reason

# The re-check cadence never goes below this, whatever PI_WAIT_INTERVAL_MS says (as in the reference).
WAIT_INTERVAL_FLOOR_MS: Final = 30_000
WAIT_BACKOFF_CAP_MS: Final = 900_000

Verdict = Literal["go", "hold", "refuse"]


@dataclass(frozen=True)
class WaitDecision:
    verdict: Verdict
    fault: bool
    aborted: bool = False


def decide_wait(
    code: int | None,
    *,
    signalled: bool = False,
    failed_to_start: bool = False,
    timed_out: bool = False,
    aborted: bool = False,
) -> WaitDecision:
    """What a check's ending means. An abort (shutdown, cancel) holds without counting as a fault."""
    if aborted:
        return WaitDecision("hold", fault=False, aborted=True)
    if signalled or failed_to_start or timed_out or code is None:
        return WaitDecision("hold", fault=True)
    if code == ExitCode.OK:
        return WaitDecision("go", fault=False)
    if code == ExitCode.HOLD:
        return WaitDecision("hold", fault=False)
    if code == ExitCode.POLICY:
        return WaitDecision("refuse", fault=False)
    return WaitDecision("hold", fault=True)


def wait_backoff_ms(base_ms: float, held_ms: float) -> int:
    """The delay before the next check: doubles every ten base periods, capped at max(15 min, base)."""
    base = max(WAIT_INTERVAL_FLOOR_MS, int(base_ms) if math.isfinite(base_ms) else WAIT_INTERVAL_FLOOR_MS)
    doublings = max(0, int(held_ms // (10 * base))) if math.isfinite(held_ms) else 0
    cap = max(WAIT_BACKOFF_CAP_MS, base)
    return cap if doublings >= 32 else min(base * 2**doublings, cap)


# An `after` condition's instant: ISO-8601 with a zone (the triggers file is checked against the same pattern).
AFTER_INSTANT: Final = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](?:[01]\d|2[0-3]):[0-5]\d(?::[0-5]\d(?:\.\d+)?)?(?:[Zz]|[+-]\d{2}:\d{2})",
    re.ASCII,  # as the schema's pattern reads \d: ASCII digits alone
)
_DAYS: Final = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


@dataclass(frozen=True)
class AfterInstant:
    """An `after` condition read: epoch ms, or the error `shape` / `calendar`."""

    epoch_ms: int | None
    error: Literal["shape", "calendar"] | None = None


def parse_after_instant(text: object) -> AfterInstant:
    """An ISO-8601 instant with a zone, on a real calendar day (no Feb 31 rolling into March)."""
    match = AFTER_INSTANT.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        return AfterInstant(None, "shape")
    year, month, day = (int(part) for part in match.groups())
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    if not 1 <= month <= 12 or not 1 <= day <= _DAYS[month - 1] + (month == 2 and leap):
        return AfterInstant(None, "calendar")
    parsed = date_parse(text)
    return AfterInstant(int(parsed)) if math.isfinite(parsed) else AfterInstant(None, "shape")


WAIT_CONDITION_MAX: Final = 4
MIN_HOLD_DELAY_MS: Final = 1_000
THROTTLE_FLOOR_MS: Final = 11_000
AFTER_NEAR_MS: Final = 1_000


@dataclass(frozen=True)
class WaitConditions:
    """A job's `waitFor`, read: the raw `after` text (if any) and the profiles in writing order."""

    after: str | None
    profiles: tuple[str, ...]


def read_conditions(value: object) -> WaitConditions | None:
    """The conditions, or None when this worker cannot read them (the job is then `wait-unreadable`)."""
    if not isinstance(value, list) or not 1 <= len(value) <= WAIT_CONDITION_MAX:
        return None
    after: str | None = None
    profiles: list[str] = []
    for condition in value:
        if not isinstance(condition, dict) or len(condition) != 1:
            return None
        ((key, item),) = condition.items()
        if key == "after" and isinstance(item, str) and after is None:
            after = item
        elif key == "profile" and is_profile_name(item) and item not in profiles:
            profiles.append(item)
        else:
            return None
    return WaitConditions(after, tuple(profiles))


@dataclass(frozen=True)
class WaitBounds:
    interval_ms: int
    max_ms: int
    max_checks: int
    max_faults: int


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**53 else 0


# The job-data key a held job carries its HoldState under (never shown to the job's container).
HOLD_KEY: Final = "waitHold"


@dataclass(frozen=True)
class HoldState:
    """What a held job carries between checks, in its job data. The clock starts at the first hold."""

    since_ms: int | None = None
    checks: int = 0
    faults: int = 0
    checked: bool = False

    @classmethod
    def from_data(cls, value: object) -> HoldState:
        """Read back tolerantly: anything unreadable counts as no hold so far."""
        if not isinstance(value, dict):
            return cls()
        since = value.get("since")
        return cls(
            since_ms=since if isinstance(since, int) and not isinstance(since, bool) and since >= 0 else None,
            checks=_count(value.get("checks")),
            faults=_count(value.get("faults")),
            checked=value.get("checked") is True,
        )

    def to_data(self) -> dict[str, object]:
        return {"since": self.since_ms, "checks": self.checks, "faults": self.faults, "checked": self.checked}


@dataclass(frozen=True)
class HoldStep:
    """After a check or a denied slot: hold again for delay_ms with the new state, or end with a reason."""

    state: HoldState
    delay_ms: int = 0
    reason: Reason | None = None


def _jittered(delay_ms: float, jitter: float) -> int:
    """Up to +10% jitter, never subtracted; jitter is a draw from [0, 1)."""
    return int(delay_ms + delay_ms * 0.1 * min(max(jitter, 0.0), 1.0))


def after_check(state: HoldState, decision: WaitDecision, now_ms: int, bounds: WaitBounds, jitter: float) -> HoldStep:
    """The step after a check that did not say go. The bounds are tested after the check, so it always runs."""
    since = state.since_ms if state.since_ms is not None else now_ms
    held = max(0, now_ms - since)
    faults = state.faults + 1 if decision.fault else 0
    following = HoldState(since, state.checks + 1, faults, checked=True)
    if decision.verdict == "refuse":
        return HoldStep(following, reason=Reason.WAIT_REFUSED)
    if faults >= bounds.max_faults:
        return HoldStep(following, reason=Reason.WAIT_UNANSWERABLE)
    if state.checks + 1 >= bounds.max_checks or held >= bounds.max_ms:
        return HoldStep(following, reason=Reason.WAIT_EXPIRED)
    delay = _jittered(wait_backoff_ms(bounds.interval_ms, held), jitter)
    return HoldStep(following, max(MIN_HOLD_DELAY_MS, min(delay, bounds.max_ms - held)))


def after_denied_slot(state: HoldState, now_ms: int, bounds: WaitBounds, jitter: float) -> HoldStep:
    """No check slot was free: re-defer at a quarter of the cadence (11 s at least), no check counted."""
    since = state.since_ms if state.since_ms is not None else now_ms
    held = max(0, now_ms - since)
    following = HoldState(since, state.checks, state.faults, state.checked)
    if held >= bounds.max_ms:
        return HoldStep(following, reason=Reason.WAIT_EXPIRED)
    quarter = max(THROTTLE_FLOOR_MS, wait_backoff_ms(bounds.interval_ms, held) // 4)
    return HoldStep(following, max(MIN_HOLD_DELAY_MS, min(_jittered(quarter, jitter), bounds.max_ms - held)))
