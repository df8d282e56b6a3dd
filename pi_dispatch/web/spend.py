"""Spend over a chosen period, by repository, flow, trigger or model: the fleet mirror's runs (each carries what it
held and what it settled to, in micro-dollars, and its tokens) summed per group, as a table and a bar chart drawn
on the server (inline SVG: no script, nothing the page's policy would have to allow)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from pi_dispatch.fleet.mirror import read_mirrored_runs

if TYPE_CHECKING:
    import redis.asyncio as aioredis

SPEND_RUNS_READ: Final = 2_000  # the newest runs of the period a report sums (two round trips)
GROUPS: Final = ("repo", "flow", "trigger", "model")
BARS: Final = 20  # the groups the chart draws, the most spent first
BAR_WIDTH: Final = 600  # the chart's longest bar, in its own units


@dataclass(frozen=True)
class SpendRow:
    """One group's runs over the period: how many, dollars held and settled (micro-dollars), tokens."""

    group: str
    runs: int
    reserved_micros: int
    settled_micros: int
    tokens: int


@dataclass(frozen=True)
class SpendReport:
    by: str
    rows: list[SpendRow]
    bars: list[tuple[SpendRow, int]]  # the chart: each of the first BARS rows with its bar's length
    runs_read: int
    truncated: bool
    degraded: str


def repo_of(target: object) -> str:
    """A record's repository from its target (`<repo>#<n>` or `<repo>!<n>`; a local run's `local:<folder>`)."""
    if not isinstance(target, str) or not target:
        return "-"
    if target.startswith("local:"):
        return target
    cut = max(target.rfind("#"), target.rfind("!"))
    return target[:cut] if cut > 0 else target


def group_of(run: Mapping[str, Any], by: str) -> str:
    if by == "repo":
        return repo_of(run.get("target"))
    field = {"flow": "flow", "trigger": "triggerType", "model": "model"}[by]
    value = run.get(field)
    if by == "model" and isinstance(run.get("provider"), str) and isinstance(value, str):
        return f"{run['provider']}/{value}"
    return value if isinstance(value, str) and value else "-"


def _count(value: object) -> int:
    """A whole number of 0 or more as a record carries it; anything else (a bool, a float, text, below 0) counts 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def spend_rows(runs: Sequence[Mapping[str, Any]], by: str) -> list[SpendRow]:
    """Runs summed per group, the most settled first (then the most runs). Pure; a malformed field counts 0."""
    sums: dict[str, list[int]] = {}
    for run in runs:
        totals = sums.setdefault(group_of(run, by), [0, 0, 0, 0])
        dollars = run.get("dollars")
        held = dollars if isinstance(dollars, Mapping) else {}
        totals[0] += 1
        totals[1] += _count(held.get("reservedMicros"))
        totals[2] += _count(held.get("settledMicros"))
        totals[3] += _count(run.get("tokens"))
    rows = [SpendRow(group, *totals) for group, totals in sums.items()]
    return sorted(rows, key=lambda row: (-row.settled_micros, -row.runs, row.group))


def bars(rows: Sequence[SpendRow]) -> list[tuple[SpendRow, int]]:
    """The chart's bars: each of the first BARS groups' settled dollars, scaled to BAR_WIDTH."""
    shown = list(rows[:BARS])
    largest = max((row.settled_micros for row in shown), default=0)
    return [(row, round(BAR_WIDTH * row.settled_micros / largest) if largest else 0) for row in shown]


async def read_spend_report(client: aioredis.Redis, by: str, since_ms: int) -> SpendReport:
    mirrored = await read_mirrored_runs(client, limit=SPEND_RUNS_READ, since_ms=since_ms)
    chosen = by if by in GROUPS else GROUPS[0]
    rows = spend_rows(mirrored.runs, chosen)
    truncated = len(mirrored.runs) >= SPEND_RUNS_READ
    return SpendReport(chosen, rows, bars(rows), len(mirrored.runs), truncated, mirrored.degraded)
