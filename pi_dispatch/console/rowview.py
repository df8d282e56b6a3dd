"""A registry row as `hosts --json` prints it: the wire's strings typed (numbers, booleans, lists), so a script
reads `"concurrency": 2`, not `"2"`. The wire itself stays strings (the reference's contract); a field this
version does not know passes through as the string it is, and a value that does not read as its type is null."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Final

from pi_dispatch.core.money import format_micros, read_dollars

# The row's numeric fields (milliseconds since the epoch, counts, a pid); blank means "not known": null.
NUMBERS: Final = frozenset(
    {"beatAt", "startedAt", "polledAt", "tookAt", "concurrency", "pid", "cronCount", "jobsMore", "slotsFree"}
)
SIGNED: Final = frozenset({"clockOffsetMs"})  # this port's: the store's clock minus the host's, either way
FLAGS: Final = frozenset({"routes", "draining"})  # "true" or anything else
LISTS: Final = frozenset({"caps"})  # comma separated tokens
JSON_LISTS: Final = frozenset({"jobs"})  # a JSON array the worker writes
CLOCK_SHOWN_MS: Final = 1_000  # a host's clock offset worth showing beside its beat


def _number(text: str) -> int | None:
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 18 else None


def _json_list(text: str) -> list[object] | None:
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return parsed if isinstance(parsed, list) else None


def typed_row(row: Mapping[str, object]) -> dict[str, object]:
    """The row with each known field as its type; fields already typed (staleMs, couldRun) are kept."""
    typed: dict[str, object] = {}
    for key, value in row.items():
        if not isinstance(value, str):
            typed[key] = value
        elif key in NUMBERS:
            typed[key] = _number(value)
        elif key in SIGNED:
            magnitude = _number(value.removeprefix("-"))
            typed[key] = None if magnitude is None else (-magnitude if value.startswith("-") else magnitude)
        elif key in FLAGS:
            typed[key] = value == "true"
        elif key in LISTS:
            typed[key] = [token for token in value.split(",") if token]
        elif key in JSON_LISTS:
            typed[key] = _json_list(value)
        else:
            typed[key] = value
    return typed


def clock_note(row: Mapping[str, object]) -> str:
    """' (clock N s ahead)' or behind, the host's clock against the store's when a second or more off."""
    offset = typed_row({"clockOffsetMs": row.get("clockOffsetMs", "")}).get("clockOffsetMs")
    if not isinstance(offset, int) or abs(offset) < CLOCK_SHOWN_MS:
        return ""
    return f" (clock {abs(offset) / 1000:.0f} s {'behind' if offset > 0 else 'ahead'})"


def run_usage(record: Mapping[str, object]) -> str:
    """What a run used, as its record says (its exit line's turns, tokens and the runner's price, then what its
    dollar hold settled to): `3 turns · 600 tokens · $0.0123 · charged $0.25 of $1.00 held (metered)`, or `-` when it
    said nothing."""
    said = []
    turns, tokens = record.get("turns"), record.get("tokens")
    if isinstance(turns, int) and not isinstance(turns, bool):
        said.append(f"{turns} turns")
    if isinstance(tokens, Mapping):
        total, cost = tokens.get("total"), tokens.get("cost")
        if isinstance(total, int | float) and not isinstance(total, bool):
            said.append(f"{int(total)} tokens")
        if isinstance(cost, int | float) and not isinstance(cost, bool) and cost >= 0:
            said.append(f"${cost:.4f}")
    if (dollars := read_dollars(record.get("dollars"))) is not None:
        reserved, settled = (format_micros(int(str(dollars[name]))) for name in ("reservedMicros", "settledMicros"))
        said.append(f"charged ${settled} of ${reserved} held ({dollars['basis']})")
    return " · ".join(said) or "-"
