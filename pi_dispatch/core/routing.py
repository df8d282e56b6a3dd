"""Which host queue a job belongs on: the reference's `routeForgeJob`, decided once (`RouteTable.candidates`).

`route_forge_job` is the literal decision, total over hostile input; `RouteTable` makes it from a registry
snapshot parsed once, which is what the enqueue path uses; `explain_route` says why each host was or was not
chosen; the audit asks the same table of its inventory (`audit/placement.py`). Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from pi_dispatch.core.capabilities import (
    ROUTE_FRESH_MS,
    Host,
    is_draining,
    is_live,
    is_stuck,
    job_needs,
    serving_caps,
    unhealthy_reason,
)
from pi_dispatch.core.jscompat import MISSING, finite, fnv1a32, get, js_number, js_sorted, js_string, nullish

ABSTAIN_NO_NEEDS: Final = "needs nothing host-specific"
ABSTAIN_ALL_CAPABLE: Final = "every live host can serve it, so the shared queue load-balances"
ABSTAIN_NONE_CAPABLE: Final = "no live host can serve it; the worker that pops it will refuse it"
ABSTAIN_NOT_ROUTABLE: Final = "no capable host drains a queue of its own (or the registry is empty)"


def _routes(host: object) -> bool:
    flag = get(host, "routes")
    return flag is True or flag == "true"


def _pick(routable: Sequence[str], job_id: object) -> str:
    if len(routable) == 1:
        return routable[0]
    return routable[fnv1a32(js_string("" if nullish(job_id) else job_id)) % len(routable)]


def route_forge_job(hosts: object, needs: object, job_id: object, *, fresh_ms: float = ROUTE_FRESH_MS) -> str | None:
    """The host whose queue this job belongs on, or None for the shared queue: the reference's `routeForgeJob`.

    Four abstentions keep the shared queue: the job needs nothing; every live host can serve it; no
    live host can; or no capable host drains a queue of its own. Otherwise the capable routable hosts,
    sorted, are indexed by FNV-1a of the job id, so a redelivery lands where the first delivery did.
    One decision, written once: the router's `RouteTable` over these hosts.
    """
    return RouteTable.from_hosts(hosts, fresh_ms=fresh_ms).route(needs, job_id)


@dataclass(frozen=True)
class Candidates:
    """Who may take a job of some needs: the live hosts that serve them, those of them that drain a queue of their
    own (sorted), and the abstention that keeps the job on the shared queue (None: it goes to one of `routable`)."""

    capable: tuple[str, ...]
    routable: tuple[str, ...]
    abstention: str | None


@dataclass
class RouteTable:
    """The live hosts of one registry snapshot (or an inventory), parsed once, answering many routing decisions:
    the routing decision itself, which `route_forge_job`, `explain_route` and the audit ask too. The per-host work
    (freshness, caps parsing, routability) is done once per snapshot, the candidates memoised per distinct needs.
    """

    live: list[tuple[frozenset[str], str, bool]]  # (what it serves, its name, whether it drains a queue of its own)
    _by_needs: dict[tuple[str, ...], Candidates] = field(default_factory=dict)

    @classmethod
    def from_hosts(cls, hosts: object, *, fresh_ms: float = ROUTE_FRESH_MS) -> RouteTable:
        if not isinstance(hosts, list):
            return cls([])
        return cls([_live_host(host) for host in hosts if is_live(host, fresh_ms)])

    def candidates(self, needs: tuple[str, ...]) -> Candidates:
        """The one decision: who can serve these needs, and why the job stays on the shared queue if it does."""
        if (known := self._by_needs.get(needs)) is not None:
            return known
        capable = [(name, routes) for caps, name, routes in self.live if caps.issuperset(needs)]
        names = tuple(name for name, _ in capable)
        routable = tuple(js_sorted(name for name, routes in capable if routes and name != ""))
        abstention = None
        if not needs:
            abstention = ABSTAIN_NO_NEEDS
        elif self.live and len(capable) == len(self.live):
            abstention = ABSTAIN_ALL_CAPABLE
        elif self.live and not capable:
            abstention = ABSTAIN_NONE_CAPABLE
        elif not routable:
            abstention = ABSTAIN_NOT_ROUTABLE
        decided = self._by_needs[needs] = Candidates(names, routable if abstention is None else (), abstention)
        return decided

    def serves(self, needs: Sequence[str]) -> bool:
        """Whether some live host can serve these needs now (none: nothing host-specific, any host can)."""
        return any(caps.issuperset(needs) for caps, _, _ in self.live)

    def route(self, needs: object, job_id: object) -> str | None:
        if not isinstance(needs, list) or not needs or not self.live:
            return None
        if not all(isinstance(need, str) for need in needs):
            return None
        routable = self.candidates(tuple(needs)).routable
        return _pick(routable, job_id) if routable else None


def _live_host(host: object) -> tuple[frozenset[str], str, bool]:
    name = get(host, "name")
    return frozenset(serving_caps(host)), name if isinstance(name, str) else "", _routes(host)


@dataclass(frozen=True)
class HostVerdict:
    """Why one host would or would not take a job."""

    name: str
    live: bool
    lacks: tuple[str, ...]
    routes: bool
    stale_ms: float | None
    chosen: bool = False
    stuck: bool = False
    draining: bool = False
    unhealthy: str = ""
    abstained: bool = False  # no host was chosen: the job stays on the shared queue

    @property
    def reason(self) -> str:
        if self.chosen:
            return "chosen"
        if not self.live:
            if self.stale_ms is None:
                return "no heartbeat time (undatable row)"
            return f"stale by {self.stale_ms / 1000:.0f} s (routing needs a beat within {ROUTE_FRESH_MS // 1000} s)"
        if self.stuck:
            return "its queue consumer is stuck (it takes no job until it restarts)"
        if self.draining:
            return "it is draining (it takes no job until `pi-dispatch resume`)"
        if self.unhealthy:
            return f"it is unhealthy ({self.unhealthy}; it takes no job until its probe finds the cause gone)"
        if self.lacks:
            return "lacks " + ", ".join(self.lacks)
        if not self.routes:
            return "no declared PI_WORKER_NAME, so it drains no queue of its own"
        if self.abstained:
            return "capable; the job stays on the shared queue (see why no host was chosen)"
        return "capable; another capable host won the job-id hash"


@dataclass(frozen=True)
class RouteExplanation:
    """A routing decision with the abstention that produced it and the per-host reasons."""

    host: str | None
    abstention: str | None
    needs: tuple[str, ...]
    hosts: tuple[HostVerdict, ...]


def explain_route(
    hosts: Sequence[Host], job: object, job_id: object, *, fresh_ms: float = ROUTE_FRESH_MS
) -> RouteExplanation:
    """The decision the router makes for this job, with the reason for every host."""
    return explain_needs(hosts, job_needs(job), job_id, fresh_ms=fresh_ms)


def explain_needs(
    hosts: Sequence[Host], needs: list[str], job_id: object, *, fresh_ms: float = ROUTE_FRESH_MS
) -> RouteExplanation:
    """`explain_route` for needs already read: the choice and the abstention are the router's own
    (`RouteTable.candidates`, the one decision); only the per-host reasons are derived beside it."""
    table = RouteTable.from_hosts(list(hosts), fresh_ms=fresh_ms)
    chosen, abstention = table.route(needs, job_id), table.candidates(tuple(needs)).abstention
    verdicts = []
    for host in hosts:
        stale = js_number(get(host, "staleMs"))
        caps = serving_caps(host)
        name = get(host, "name")
        verdicts.append(
            HostVerdict(
                name=js_string(name) if name is not MISSING else "?",
                live=is_live(host, fresh_ms),
                lacks=tuple(need for need in needs if need not in caps),
                routes=_routes(host),
                stale_ms=stale if finite(stale) else None,
                chosen=chosen is not None and name == chosen,
                stuck=is_stuck(host),
                draining=is_draining(host),
                unhealthy=unhealthy_reason(host),
                abstained=chosen is None,
            )
        )
    return RouteExplanation(chosen, abstention if chosen is None else None, tuple(needs), tuple(verdicts))
