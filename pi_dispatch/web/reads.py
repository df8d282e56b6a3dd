"""What each console page shows, read from the store in a bounded number of round trips whatever it holds: the runs
the fleet mirror keeps (filtered), one job's whereabouts and attempts (the `job` command's reading), the fleet (the
`hosts` command's), and the limits (the `limits` command's, against the caps the live hosts publish)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from pi_dispatch.console.fleetread import FleetRead, read_fleet_state
from pi_dispatch.console.jobfacts import read_job_facts
from pi_dispatch.core.scopedlimits import ScopedLimits
from pi_dispatch.fleet.limitview import LimitsView, published_caps, read_limits
from pi_dispatch.fleet.mirror import read_mirrored_runs
from pi_dispatch.fleet.registry import LiveHosts
from pi_dispatch.fleet.snapshot import registry_now

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from pi_dispatch.infra.store import StoreAddress

RUNS_READ: Final = 500  # the newest mirrored runs a runs page filters (one round trip)
RUNS_SHOWN: Final = 100
OUTCOMES: Final = ("completed", "policy", "failed")


@dataclass(frozen=True)
class RunFilter:
    """What the runs page narrows the newest runs to; empty fields narrow nothing."""

    outcome: str = ""
    host: str = ""
    flow: str = ""
    trigger: str = ""
    since_ms: int = 0

    @classmethod
    def of(cls, query: Mapping[str, str], since_ms: int) -> RunFilter:
        outcome = query.get("outcome", "")
        return cls(
            outcome if outcome in OUTCOMES else "",
            query.get("host", "")[:64],
            query.get("flow", "")[:64],
            query.get("trigger", "")[:32],
            since_ms,
        )

    def keeps(self, run: Mapping[str, Any]) -> bool:
        wanted = ((self.outcome, "outcome"), (self.host, "host"), (self.flow, "flow"), (self.trigger, "triggerType"))
        return all(not value or run.get(field) == value for value, field in wanted)


async def read_runs(client: aioredis.Redis, chosen: RunFilter) -> tuple[list[Mapping[str, Any]], str]:
    """The newest mirrored runs the filter keeps (at most RUNS_SHOWN), and how far to trust the mirror."""
    mirrored = await read_mirrored_runs(client, limit=RUNS_READ, since_ms=chosen.since_ms)
    return [run for run in mirrored.runs if chosen.keeps(run)][:RUNS_SHOWN], mirrored.degraded


async def read_job(client: aioredis.Redis, job_id: str) -> dict[str, Any]:
    return await read_job_facts(client, job_id, None)


PAGE_SIZE: Final = 100  # rows a fleet page shows: thousands of hosts read in pages
NAMES_SHOWN: Final = 40  # the hosts named beside each route answer, unless every one is asked for


@dataclass(frozen=True)
class Page:
    """One page of a long list: its rows, its number (from 1) and how many there are."""

    rows: list[Any]
    number: int
    count: int
    total: int

    @classmethod
    def of(cls, asked: str, every: Sequence[Any]) -> Page:
        count = max(1, -(-len(every) // PAGE_SIZE))
        number = min(max(1, int(asked)), count) if asked.isascii() and asked.isdigit() and len(asked) < 7 else 1
        return cls(list(every[(number - 1) * PAGE_SIZE : number * PAGE_SIZE]), number, count, len(every))


@dataclass(frozen=True)
class RouteAnswer:
    """One answer hosts gave the router for a job, with how many gave it and (up to a limit) which."""

    reason: str
    count: int
    names: list[str]
    chosen: bool

    @property
    def whole(self) -> bool:
        """Every host that gave it is named."""
        return len(self.names) == self.count


def grouped_answers(route: Mapping[str, Any] | None, every: bool) -> list[RouteAnswer]:
    """Every host's route answer grouped by answer, the chosen host's first, then the most given: a fleet of
    thousands reads in a few lines, each host still under its answer."""
    if route is None:
        return []
    groups: dict[str, list[str]] = {}
    for verdict in route["hosts"]:
        groups.setdefault(str(verdict["reason"]), []).append(str(verdict["name"]))
    chosen = route.get("host")
    answers = [
        RouteAnswer(reason, len(names), names if every else names[:NAMES_SHOWN], chosen in names)
        for reason, names in groups.items()
    ]
    return sorted(answers, key=lambda answer: (not answer.chosen, -answer.count, answer.reason))


async def read_fleet(client: aioredis.Redis, store: StoreAddress) -> FleetRead:
    return await read_fleet_state(client, store)


async def read_spend(client: aioredis.Redis, now_ms: int) -> LimitsView:
    """The fleet's windows against the caps most live hosts publish (no env file here: the console runs anywhere)."""
    live = await registry_now(client)
    rows: Sequence[Mapping[str, Any]] = live.hosts if isinstance(live, LiveHosts) else []
    caps, tokens = published_caps(rows)
    return await read_limits(client, caps, tokens, ScopedLimits(), rows=rows, now_ms=now_ms)
