"""What a host can serve and what a job needs: capability tokens, a job's needs, and a host row's predicates
(live, stuck, draining, unhealthy). A port of the reference's capabilities module; where a job goes is
`core/routing.py`. Pure.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from functools import lru_cache
from typing import Final

from pi_dispatch.core.jscompat import finite, get, js_number, js_sorted, js_string, nullish
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
        row
        if is_draining(row) == (str(row.get("name")) in drained)
        else {**row, "draining": "true" if str(row.get("name")) in drained else ""}
        for row in hosts
    ]


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
