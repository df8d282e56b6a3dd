"""What a host can serve, and which host queue a job that needs it belongs on.

A port of the reference's capabilities module. `route_forge_job` is the literal decision, total over
hostile input; `RouteTable` makes the same decision from a registry snapshot it has parsed once, which is
what the enqueue path uses, and `explain_route` says why each host was or was not chosen. Pure.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Final

from pi_dispatch.core.jscompat import MISSING, finite, fnv1a32, get, js_number, js_sorted, js_string, nullish
from pi_dispatch.core.names import HOST_VAR_PREFIX, is_profile_name
from pi_dispatch.core.profiles import DEFAULT_SECRET_PROFILE

CAP_SECRET: Final = "s"  # noqa: S105 - a class letter, not a secret
CAP_WAIT: Final = "w"
# A job binding secrets without naming a profile uses this one, and is never routed for it.
DEFAULT_SECRET_TOKEN: Final = f"{CAP_SECRET}:{DEFAULT_SECRET_PROFILE}"
# Evidence of life, not absence of expiry: three beats, well inside the 90 s row TTL.
ROUTE_FRESH_MS: Final = 45_000

Host = Mapping[str, object]


def _token(cap_class: str, name: object) -> str | None:
    return f"{cap_class}:{name}" if is_profile_name(name) else None


def _object_keys(value: object) -> list[str]:
    """`Object.keys(value ?? {})` for the shapes a config table can take."""
    if isinstance(value, Mapping):
        return [key for key in value if isinstance(key, str)]
    if isinstance(value, list | tuple | str):
        return [str(index) for index in range(len(value))]
    return []


def capability_tokens(secret_profiles: object = None, wait_profiles: object = None) -> list[str]:
    """This host's tokens from its own declared profiles, deduped and sorted so the row is stable."""
    tokens = {_token(CAP_SECRET, name) for name in _object_keys(secret_profiles)}
    tokens |= {_token(CAP_WAIT, name) for name in _object_keys(wait_profiles)}
    return js_sorted(token for token in tokens if token is not None)


def serialize_caps(tokens: Iterable[str] | None) -> str:
    """The registry value; the name charset excludes the comma, so the join is unambiguous."""
    return ",".join(tokens or [])


def parse_caps_ordered(raw: object) -> list[str]:
    """A peer's tokens in input order, each re-validated: the row is written by another process."""
    return list(_valid_tokens(js_string("" if nullish(raw) else raw)))


@lru_cache(maxsize=4096)  # a fleet's hosts share a few caps strings; a reader of thousands parses each once
def _valid_tokens(text: str) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for part in text.split(","):
        cap_class, colon, name = part.partition(":")
        if colon and cap_class in (CAP_SECRET, CAP_WAIT) and is_profile_name(name):
            seen[part] = None
    return tuple(seen)


def parse_caps(raw: object) -> set[str]:
    """A peer's valid tokens as a set."""
    return set(parse_caps_ordered(raw))


def need_label(need: str) -> str:
    """`secret profile 'prod'`: a need as the audit names it."""
    kind, _, name = need.partition(":")
    return f"{'secret' if kind == CAP_SECRET else 'wait'} profile {name!r}"


def profile_variable(need: str) -> str:
    """The inventory variable that declares what a need names."""
    return f"{HOST_VAR_PREFIX}{'secret' if need.startswith(f'{CAP_SECRET}:') else 'wait'}_profiles"


def job_needs(job: object) -> list[str]:
    """What a job needs from its host: its secret profile and its wait profiles, deduped and sorted.

    An absent `secretsProfile` adds no `s:default` need even though the worker resolves `default` at run
    time; such jobs are never routed, exactly as in the reference.
    """
    needs: set[str] = set()
    secret = _token(CAP_SECRET, get(job, "secretsProfile"))
    if secret:
        needs.add(secret)
    conditions = get(job, "waitFor")
    if isinstance(conditions, list):
        for condition in conditions:
            wait = _token(CAP_WAIT, get(condition, "profile"))
            if wait:
                needs.add(wait)
    return js_sorted(needs)


def is_live(host: object, fresh_ms: float = ROUTE_FRESH_MS) -> bool:
    """Whether a reader's host beat recently enough to be routed to; an undatable row is not evidence of life."""
    stale = js_number(get(host, "staleMs"))
    return finite(stale) and stale <= fresh_ms


# A row's `consumer` says whether its queue consumer is taking jobs; a stuck one serves nothing until it restarts.
CONSUMER_STUCK: Final = "stuck"


def is_stuck(host: object) -> bool:
    return get(host, "consumer") == CONSUMER_STUCK


# A row's `draining` (this port's own field) says an operator is taking the host out of service: it finishes what
# it runs and takes nothing new until `pi-dispatch resume`. A Node reader ignores the field.
def is_draining(host: object) -> bool:
    flag = get(host, "draining")
    return flag is True or flag == "true"


def with_drains(hosts: list[dict[str, object]], drained: Collection[str]) -> list[dict[str, object]]:
    """The rows with each host's drain as the operator's fact says now (`control:drained`); a row itself says so
    only from its host's next beat. A row the fact agrees with is kept as it is."""
    return [
        row if is_draining(row) == (str(row.get("name")) in drained) else
        {**row, "draining": "true" if str(row.get("name")) in drained else ""}
        for row in hosts
    ]  # fmt: skip


# A row's `unhealthy` (this port's own field) says why the host cannot run jobs now (its folders, its image, its
# Docker daemon): it takes nothing until its own probe finds the cause gone. A Node reader ignores the field.
def unhealthy_reason(host: object) -> str:
    reason = get(host, "unhealthy")
    return reason if isinstance(reason, str) else ""


def out_of_service(host: object) -> bool:
    """Whether a live host takes no new job: drained by an operator, or unhealthy by its own account."""
    return is_draining(host) or unhealthy_reason(host) != ""


def serving_caps(host: object) -> set[str]:
    """The capabilities a host can serve now: its caps, or none while its consumer is stuck, it is draining or it
    is unhealthy (it stays live, so it still counts against the every-host-can abstention)."""
    return set() if is_stuck(host) or out_of_service(host) else parse_caps(get(host, "caps"))


def _routes(host: object) -> bool:
    flag = get(host, "routes")
    return flag is True or flag == "true"


def _routable_name(host: object) -> str | None:
    name = get(host, "name")
    return name if _routes(host) and isinstance(name, str) and name != "" else None


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


@dataclass
class RouteTable:
    """One registry snapshot, parsed once, answering many routing decisions: the routing decision itself, which
    `route_forge_job` and `explain_route` ask too. The per-host work (freshness, caps parsing, routability) is done
    once per snapshot, and the routable list memoised per distinct needs.
    """

    live_caps: list[tuple[frozenset[str], str | None]]
    _routable_by_needs: dict[tuple[str, ...], tuple[str, ...] | None] = field(default_factory=dict)

    @classmethod
    def from_hosts(cls, hosts: object, *, fresh_ms: float = ROUTE_FRESH_MS) -> RouteTable:
        if not isinstance(hosts, list):
            return cls([])
        return cls([(frozenset(serving_caps(host)), _routable_name(host)) for host in hosts if is_live(host, fresh_ms)])

    def _routable_for(self, needs: tuple[str, ...]) -> tuple[str, ...] | None:
        capable = [name for caps, name in self.live_caps if caps.issuperset(needs)]
        if not capable or len(capable) == len(self.live_caps):
            return None
        routable = js_sorted(name for name in capable if name is not None)
        return tuple(routable) if routable else None

    def serves(self, needs: Sequence[str]) -> bool:
        """Whether some live host can serve these needs now (none: nothing host-specific, any host can)."""
        return any(caps.issuperset(needs) for caps, _ in self.live_caps)

    def route(self, needs: object, job_id: object) -> str | None:
        if not isinstance(needs, list) or not needs or not self.live_caps:
            return None
        if not all(isinstance(need, str) for need in needs):
            return None
        key = tuple(needs)
        if key not in self._routable_by_needs:
            self._routable_by_needs[key] = self._routable_for(key)
        routable = self._routable_by_needs[key]
        return _pick(routable, job_id) if routable else None


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


ABSTAIN_NO_NEEDS: Final = "needs nothing host-specific"
ABSTAIN_ALL_CAPABLE: Final = "every live host can serve it, so the shared queue load-balances"
ABSTAIN_NONE_CAPABLE: Final = "no live host can serve it; the worker that pops it will refuse it"
ABSTAIN_NOT_ROUTABLE: Final = "no capable host drains a queue of its own (or the registry is empty)"


def explain_route(
    hosts: Sequence[Host], job: object, job_id: object, *, fresh_ms: float = ROUTE_FRESH_MS
) -> RouteExplanation:
    """The decision the router makes for this job, with the reason for every host."""
    return explain_needs(hosts, job_needs(job), job_id, fresh_ms=fresh_ms)


def explain_needs(
    hosts: Sequence[Host], needs: list[str], job_id: object, *, fresh_ms: float = ROUTE_FRESH_MS
) -> RouteExplanation:
    """`explain_route` for needs already read: the choice is the router's own (`RouteTable.route`, the one
    decision); only the reasons are derived beside it."""
    chosen = RouteTable.from_hosts(list(hosts), fresh_ms=fresh_ms).route(needs, job_id)
    verdicts = []
    live_count = capable_count = 0
    for host in hosts:
        stale = js_number(get(host, "staleMs"))
        live = finite(stale) and stale <= fresh_ms
        caps = serving_caps(host)
        lacks = tuple(need for need in needs if need not in caps)
        live_count += live
        capable_count += live and not lacks
        name = get(host, "name")
        verdicts.append(
            HostVerdict(
                name=js_string(name) if name is not MISSING else "?",
                live=live,
                lacks=lacks,
                routes=_routes(host),
                stale_ms=stale if finite(stale) else None,
                chosen=chosen is not None and name == chosen,
                stuck=is_stuck(host),
                draining=is_draining(host),
                unhealthy=unhealthy_reason(host),
                abstained=chosen is None,
            )
        )
    abstention = None
    if chosen is None:
        if not needs:
            abstention = ABSTAIN_NO_NEEDS
        elif live_count and capable_count == live_count:
            abstention = ABSTAIN_ALL_CAPABLE
        elif live_count and capable_count == 0:
            abstention = ABSTAIN_NONE_CAPABLE
        else:
            abstention = ABSTAIN_NOT_ROUTABLE
    return RouteExplanation(chosen, abstention, tuple(needs), tuple(verdicts))
