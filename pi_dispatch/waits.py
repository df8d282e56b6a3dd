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

from pi_dispatch.jscompat import date_parse

EXIT_GO: Final = 0
EXIT_INFRA: Final = 1
EXIT_POLICY: Final = 2
EXIT_HOLD: Final = 3
WAIT_INTERVAL_FLOOR_MS: Final = 30_000
WAIT_BACKOFF_CAP_MS: Final = 900_000
WAIT_REASONS: Final = (
    "wait-refused",
    "wait-expired",
    "wait-unanswerable",
    "wait-profile-unknown",
    "wait-superseded",
    "wait-skew",
    "wait-unreadable",
    "wait-after-beyond-max",
)

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
    if code == EXIT_GO:
        return WaitDecision("go", fault=False)
    if code == EXIT_HOLD:
        return WaitDecision("hold", fault=False)
    if code == EXIT_POLICY:
        return WaitDecision("refuse", fault=False)
    return WaitDecision("hold", fault=True)


def wait_backoff_ms(base_ms: float, held_ms: float) -> int:
    """The delay before the next check: doubles every ten base periods, capped at max(15 min, base)."""
    base = max(WAIT_INTERVAL_FLOOR_MS, int(base_ms) if math.isfinite(base_ms) else WAIT_INTERVAL_FLOOR_MS)
    doublings = max(0, int(held_ms // (10 * base))) if math.isfinite(held_ms) else 0
    cap = max(WAIT_BACKOFF_CAP_MS, base)
    return cap if doublings >= 32 else min(base * 2**doublings, cap)


AFTER_INSTANT: Final = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](?:[01]\d|2[0-3]):[0-5]\d(?::[0-5]\d(?:\.\d+)?)?(?:[Zz]|[+-]\d{2}:\d{2})"
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
