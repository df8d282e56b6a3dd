"""Cron patterns as BullMQ's parser (croniter, seconds first when there are six fields) reads them: why one is
refused, said per field, and when one fires next in a zone. croniter decides; this module only says which field."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any, Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

# The fields of a five-field pattern, with their ranges; a six-field one has `second` first.
FIELDS: Final = (
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day of month", 1, 31),
    ("month", 1, 12),
    ("day of week", 0, 7),
)
SECOND: Final = ("second", 0, 59)


def _croniter() -> Any:
    from croniter import croniter

    return croniter


def _accepted(pattern: str) -> bool:
    try:
        return bool(_croniter().is_valid(pattern, second_at_beginning=True))
    except Exception:  # broad: a third-party parser on operator text; that it chokes on a pattern is the answer
        return False


def why_refused(pattern: str) -> str | None:
    """None when the parser reads the pattern, else why not, naming the field (`minute 61 is out of range 0-59`)."""
    if _accepted(pattern):
        return None
    fields = pattern.split()
    if len(fields) not in (5, 6):
        shape = "5 (minute hour day-of-month month day-of-week) or 6 (second first)"
        return f"has {len(fields)} fields; a pattern has {shape}"
    named = (SECOND, *FIELDS) if len(fields) == 6 else FIELDS
    for position, (name, low, high) in enumerate(named):
        alone = ["*"] * len(fields)
        alone[position] = fields[position]
        if _accepted(" ".join(alone)):
            continue
        outside = [int(number) for number in re.findall(r"\d+", fields[position]) if not low <= int(number) <= high]
        if outside:
            return f"{name} {outside[0]} is out of range {low}-{high}"
        return f"{name} {fields[position]!r} is not a value the field takes ({low}-{high}, *, lists, ranges, steps)"
    return "is not a pattern the parser reads"


def next_runs(pattern: str, zone: str, count: int = 3, now: datetime | None = None) -> list[datetime]:
    """When the pattern fires next in the zone (UTC when the zone is empty or unknown), as BullMQ's scheduler
    computes each run (from the one before, with its own repeat strategy); [] when it never does."""
    from pi_dispatch.infra.bullmq import next_repeat_ms

    try:
        where = ZoneInfo(zone) if zone else UTC
    except (ZoneInfoNotFoundError, ValueError):
        where = UTC
    options: dict[str, Any] = {"pattern": pattern} | ({"tz": zone} if where is not UTC else {})
    millis = int((now or datetime.now(tz=UTC)).timestamp() * 1000)
    runs: list[datetime] = []
    try:
        for _ in range(count):
            if (found := next_repeat_ms(millis, options)) is None:
                break
            millis = found
            runs.append(datetime.fromtimestamp(millis / 1000, tz=where))
    except Exception:  # broad: croniter gives up on a date that never comes (the 31st of February) in its own ways
        return []
    return runs
