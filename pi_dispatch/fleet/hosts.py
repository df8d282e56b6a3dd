"""A host of the fleet, however it is known: from this host's settings, from an inventory host, or from a row.

One type says what placement needs of a host (how the operator names it, the worker name it publishes under,
whether that name is declared, its capability tokens), and one function builds the heartbeat row peers route
by. The worker, the demo, `route`, `hosts` and the audit all use these, so a name is derived one way only.
A named host's queue, and since when its host has been silent, is here too: the re-homer acts on it, `hosts`
and `audit --live` show it. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from pi_dispatch import __version__
from pi_dispatch.core.capabilities import capability_tokens, is_live, parse_caps, serialize_caps
from pi_dispatch.core.jscompat import finite, js_number, js_sorted
from pi_dispatch.core.names import worker_name_of
from pi_dispatch.core.runtimes import ROW_FIELD

if TYPE_CHECKING:  # the operator's readers of rows need neither the settings nor the inventory models loaded
    from pi_dispatch.config.hostvars import InventoryHost
    from pi_dispatch.config.worker_settings import WorkerSettings

# Fields the reference publishes that this port has no value for yet (cron, the pi CLI's version).
NOT_YET: Final = {"piVersion": "", "fpCron": "", "cronCount": "0"}


@dataclass(frozen=True)
class FleetHost:
    """A host as placement sees it. `name` is the operator's name for it (the inventory's, else the worker's)."""

    name: str
    worker_name: str
    declared: bool
    tokens: frozenset[str]

    @classmethod
    def of_settings(cls, settings: WorkerSettings) -> FleetHost:
        """This host, as its worker runs it (the settings already derived its name)."""
        tokens = frozenset(capability_tokens(settings.secret_profiles, settings.wait_profiles))
        return cls(settings.worker_name, settings.worker_name, settings.worker_name_declared, tokens)

    @classmethod
    def of_inventory(cls, host: InventoryHost, hostname: str | None = None) -> FleetHost:
        """An inventory host; undeclared, it publishes under its hostname (its inventory name unless given)."""
        tokens = frozenset(capability_tokens(host.secret_profiles, host.wait_profiles))
        worker = worker_name_of(host.worker_name, hostname or host.name)
        return cls(host.name, worker, host.worker_name is not None, tokens)

    @classmethod
    def of_row(cls, row: Mapping[str, object]) -> FleetHost:
        """A registry row as its peers read it: the name it beats under, its routes flag, its valid tokens."""
        name = str(row.get("name"))
        return cls(name, name, row.get("routes") == "true", frozenset(parse_caps(row.get("caps"))))

    @property
    def routes(self) -> str:
        """The row's `routes` field: only a declared name drains a queue of its own."""
        return "true" if self.declared else "false"

    @property
    def caps(self) -> str:
        """The row's `caps` field: the tokens sorted as the reference sorts them."""
        return serialize_caps(js_sorted(self.tokens))


def heartbeat_row(
    host: FleetHost,
    *,
    image: str = "",
    image_digest: str = "",
    concurrency: int | None = None,
    pid: int | None = None,
    tz: str = "",
    runtimes: Iterable[str] = (),
) -> dict[str, str]:
    """The fields a host's beat publishes besides `name`, `beatAt` and `startedAt` (the registry stamps those)."""
    return {
        "version": __version__,
        "image": image,
        "imageDigest": image_digest,
        "piVersion": NOT_YET["piVersion"],
        "concurrency": "" if concurrency is None else str(concurrency),
        "pid": "" if pid is None else str(pid),
        "routes": host.routes,
        "caps": host.caps,
        "tz": tz,
        "fpCron": NOT_YET["fpCron"],
        "cronCount": NOT_YET["cronCount"],
        ROW_FIELD: ",".join(sorted(runtimes)),  # this port's: the runtimes besides Docker's default it can run
    }


def routing_view(host: FleetHost, row: Mapping[str, str]) -> dict[str, object]:
    """A row as a router reads it, for a host assumed live now: what `route --inventory` routes against."""
    return {**row, "name": host.worker_name, "staleMs": 0}


def silent_since(row: Mapping[str, object] | None, stored: int | None, now_ms: int) -> int | None:
    """Since when a named host has been without a live row: None while it is live; else its last beat, or the
    earliest a peer saw it missing. Pure."""
    if row is not None and is_live(row):
        return None
    stale = js_number(row.get("staleMs")) if row is not None else float("nan")
    candidates = [stored] if stored is not None else []
    if finite(stale):
        candidates.append(now_ms - int(stale))
    return min(candidates) if candidates else now_ms


@dataclass(frozen=True)
class QueueCounts:
    waiting: int = 0
    delayed: int = 0
    prioritized: int = 0
    active: int = 0
    failed: int = 0

    def by_state(self) -> dict[str, int]:
        """Each state's count, under the names `pi_dispatch_queue_jobs` and `top` use."""
        return {
            "waiting": self.waiting,
            "delayed": self.delayed,
            "active": self.active,
            "prioritized": self.prioritized,
            "failed": self.failed,
        }

    @property
    def movable(self) -> int:
        return self.waiting + self.delayed + self.prioritized

    @property
    def total(self) -> int:
        return self.movable + self.active

    def describe(self) -> str:
        """`2 waiting, 1 delayed`: the states that hold a job, or `no jobs`."""
        parts = [(self.waiting, "waiting"), (self.delayed, "delayed"), (self.prioritized, "prioritized")]
        parts.append((self.active, "active"))
        return ", ".join(f"{count} {state}" for count, state in parts if count) or "no jobs"


@dataclass(frozen=True)
class HostQueue:
    """A named host's queue as the re-homer sees it: its jobs, and since when its host is silent (None: live)."""

    queue: str
    host: str
    counts: QueueCounts
    silent_since_ms: int | None
    oldest_waiting_ms: int | None = None  # when the job longest in `wait` was added

    def due_ms(self, after_ms: int) -> int | None:
        return None if self.silent_since_ms is None else self.silent_since_ms + after_ms
