"""Live drift: what the registry says against what the inventory declares (the doctor's fleet checks)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Final

from pi_dispatch.audit.findings import Finding
from pi_dispatch.core.capabilities import ROUTE_FRESH_MS, is_draining, unhealthy_reason
from pi_dispatch.core.jscompat import iso_string, js_number
from pi_dispatch.fleet.backlog import idle_capable
from pi_dispatch.fleet.hosts import FleetHost, HostQueue
from pi_dispatch.fleet.liveness import not_draining
from pi_dispatch.fleet.registry import HOST_BEAT_MS, InvalidRow
from pi_dispatch.fleet.steal import Waiting

DOCTOR_STALE_MS: Final = 300_000
UNROUTED: Final = "so host routing is OFF there"


# The facts every live host must agree on, the finding when they do not, and its fix.
AGREED: Final = (
    ("tz", "tz-mismatch", "set the same TZ on every host"),
    ("imageDigest", "digest-mismatch", "rebuild or re-pull so every host runs the same image"),
    ("version", "version-mixed", "finish the rollout (or roll back with the previous pin) so every host runs one"),
)


def live_findings(
    fleet: Sequence[FleetHost], rows: Sequence[Mapping[str, object]], liveness: dict[str, str]
) -> tuple[list[Finding], set[str]]:
    """Drift between inventory and registry, and the inventory hosts that cannot be routed to now.

    Fills liveness with a note for each host that is up, for the placement findings to quote.
    """
    findings: list[Finding] = []
    down: set[str] = set()
    live = {str(row.get("name")): row for row in rows}
    for host in fleet:
        row = live.get(host.worker_name)
        beat = row.get("staleMs") if row is not None else None
        if isinstance(beat, int | float) and beat <= ROUTE_FRESH_MS:
            liveness[host.name] = f"up, last beat {beat / 1000:.0f} s ago"
        if row is None:
            findings.append(
                Finding(
                    "host-silent",
                    f"host {host.name}",
                    f"no registry row for worker {host.worker_name!r}",
                    "start its worker (systemctl status pi-dispatch-worker) and check its VALKEY_URL",
                    (host.name,),
                )
            )
            down.add(host.name)
            continue
        stale = _stale_finding(host, row)
        if stale is not None:
            down.add(host.name)
            findings.append(stale)
        findings += _published_findings(host, row)
    return findings + _unknown_findings(fleet, live) + _disagreement_findings(live), down


def _stale_finding(host: FleetHost, row: Mapping[str, object]) -> Finding | None:
    """A host whose last beat is too old to route to, or None while it beats."""
    stale = row.get("staleMs")
    if isinstance(stale, int | float) and stale <= ROUTE_FRESH_MS:
        return None
    age = f"{stale / 1000:.0f} s" if isinstance(stale, int | float) else "an unknown time"
    code = "host-stale-doctor" if isinstance(stale, int | float) and stale > DOCTOR_STALE_MS else "host-stale"
    return Finding(
        code, f"host {host.name}", f"last beat {age} ago", "check that the worker runs and clocks agree", (host.name,)
    )


def _published_findings(host: FleetHost, row: Mapping[str, object]) -> list[Finding]:
    """What a host's row publishes against what its inventory declares: its capabilities and its routing."""
    findings = []
    seen = FleetHost.of_row(row)
    published = seen.tokens
    if published != host.tokens:
        missing, extra = sorted(host.tokens - published), sorted(published - host.tokens)
        parts = (f"missing {', '.join(missing)}" if missing else "", f"extra {', '.join(extra)}" if extra else "")
        findings.append(
            Finding(
                "caps-drift",
                f"host {host.name}",
                f"publishes {'; '.join(part for part in parts if part)}",
                "roll the inventory out again (or fix the inventory) and restart the worker",
                (host.name,),
            )
        )
    if seen.declared is not host.declared:
        findings.append(
            Finding(
                "routes-drift",
                f"host {host.name}",
                f"routes={row.get('routes')!s} but the inventory {'names' if host.declared else 'does not name'} it",
                "roll the inventory out again",
                (host.name,),
            )
        )
    return findings


def _unknown_findings(fleet: Sequence[FleetHost], live: Mapping[str, Mapping[str, object]]) -> list[Finding]:
    """Rows of workers no inventory declares, and nameless workers among peers (host routing is off there)."""
    known = {host.worker_name for host in fleet}
    findings = [
        Finding(
            "host-unknown",
            f"worker {name}",
            "publishes a row but is in no inventory",
            "add it to the inventory, or stop it",
            (name,),
        )
        for name in sorted(live)
        if name not in known
    ]
    if len(live) > 1:
        findings += [
            Finding(
                "peer-undeclared",
                f"worker {name}",
                f"has peers but no PI_WORKER_NAME, {UNROUTED}",
                "set pi_dispatch_worker_name for it and roll out",
                (name,),
            )
            for name, row in sorted(live.items())
            if not FleetHost.of_row(row).declared
        ]
    return findings


def _disagreement_findings(live: Mapping[str, Mapping[str, object]]) -> list[Finding]:
    """Each fact of AGREED on which the live hosts disagree, with the hosts on each value."""
    findings = []
    for key, code, fix in AGREED:
        values: dict[str, list[str]] = defaultdict(list)
        for name, row in live.items():
            if row.get(key):
                values[str(row[key])].append(name)
        if len(values) > 1:
            detail = "; ".join(f"{value}: {', '.join(sorted(names))}" for value, names in sorted(values.items()))
            findings.append(Finding(code, f"live {key}", detail, fix))
    return findings


def queue_findings(queues: Sequence[HostQueue], after_ms: Mapping[str, int], now_ms: int) -> list[Finding]:
    """A named host's queue that holds jobs while its host is silent: when they move, or that they move now."""
    findings = []
    for queue in queues:
        due = queue.due_ms(after_ms[queue.host])
        if due is None or queue.counts.total == 0 or queue.silent_since_ms is None:
            continue
        held = queue.counts.describe()
        when = "on the next sweep (it is due)" if due <= now_ms else f"at {iso_string(due)}"
        findings.append(
            Finding(
                "queue-silent-host",
                f"queue {queue.queue}",
                f"holds {held}; {queue.host} has been silent since {iso_string(queue.silent_since_ms)}, so its jobs "
                f"move to the live fleet {when}",
                f"bring {queue.host} back, or let its jobs move (the threshold is "
                f"pi_dispatch_worker_rehome_after_ms on the hosts)",
                (queue.host,),
            )
        )
    return findings


def draining_findings(
    live_rows: Sequence[Mapping[str, object]], queues: Sequence[HostQueue], now_ms: int
) -> list[Finding]:
    """A live host that takes no job (`liveness.not_draining`), with its evidence: the free slots, the last poll,
    and the oldest job waiting on its queue."""
    oldest = {queue.host: queue.oldest_waiting_ms for queue in queues}
    findings = [
        Finding(
            "host-draining",
            f"worker {row.get('name')}",
            "is draining: routers leave it out and it takes no job",
            f"pi-dispatch resume {row.get('name')} when it may take work again",
            (str(row.get("name")),),
        )
        for row in live_rows
        if is_draining(row)
    ]
    findings += [
        Finding(
            "host-unhealthy",
            f"worker {row.get('name')}",
            f"takes no job: {reason}",
            "what its reason names; `pi-dispatch config check --live` on the host names each cause",
            (str(row.get("name")),),
        )
        for row in live_rows
        if (reason := unhealthy_reason(row))
    ]
    for row in live_rows:
        if (drain := not_draining(row, now_ms)) is None:
            continue
        name = str(row.get("name"))
        evidence = drain.evidence()
        if (waiting := oldest.get(name)) is not None:
            evidence.append(f"the oldest job waiting on its queue was added {(now_ms - waiting) / 1000:.0f} s ago")
        findings.append(
            Finding(
                "host-not-draining",
                f"worker {name}",
                "; ".join(evidence),
                "the worker exits on its own and systemd restarts it; if it keeps coming back stuck, check its "
                "connection to the store (a firewall dropping idle connections), then journalctl -u "
                "pi-dispatch-worker",
                (name,),
            )
        )
    return findings


def invalid_row_findings(invalid: Sequence[InvalidRow]) -> list[Finding]:
    """Rows the reader refused: a peer breaking the contract, or someone forging rows with the store's password."""
    return [
        Finding(
            "row-invalid",
            f"registry entry {row.member!r}",
            f"is not routed to: {row.reason}",
            f"find what writes host:h:{row.member!r} (a worker with a bad clock, or a foreign writer) and stop it",
        )
        for row in invalid
    ]


def idle_slot_findings(
    live_rows: Sequence[Mapping[str, object]], waiting: Sequence[Waiting], after_ms: Mapping[str, int]
) -> list[Finding]:
    """A capable host's slots idle while work it could run waited (`fleet/backlog.idle_capable`)."""
    return [
        Finding(
            "capable-slot-idle",
            f"worker {idle.host}",
            f"{idle.slots_free} slots free while job {idle.job.job_id} waited {idle.waited_ms / 1000:.0f} s on "
            f"{idle.job.queue}, which it could run",
            "keep stealing on (pi_dispatch_worker_steal: true) on hosts that share profiles; if it is on, look for "
            "job_stolen and queue_error in journalctl -u pi-dispatch-worker on that host",
            (idle.host,),
        )
        for idle in idle_capable(live_rows, waiting, after_ms, HOST_BEAT_MS)
    ]


def clock_findings(live_rows: Sequence[Mapping[str, object]], max_ms: Mapping[str, int]) -> list[Finding]:
    """A live host whose clock is further from the store's than its bound (the row's `clockOffsetMs`)."""
    found = []
    for row in live_rows:
        name, offset = str(row.get("name")), js_number(row.get("clockOffsetMs"))
        if math.isfinite(offset) and abs(offset) > max_ms[name]:
            found.append(
                Finding(
                    "clock-skew",
                    f"worker {name}",
                    f"its clock is {abs(offset) / 1000:.1f} s {'behind' if offset > 0 else 'ahead of'} the store's "
                    f"(bound {max_ms[name] / 1000:g} s): it takes no job and does not re-home until it is back",
                    "sync it (timedatectl set-ntp true; chronyc tracking)",
                    (name,),
                )
            )
    return found
