"""`pi-dispatch audit`: every trigger whose jobs would be refused, and the drift between inventory and fleet.

Pure given its inputs: the inventory's worker hosts, the triggers, and (with --live) the registry rows.
Each trigger's needs are computed exactly as the router computes them (`job_needs`), then classified
against the hosts that are up: hosts named by --simulate-down, and with --live the hosts that are silent
or too stale to be routed to, are down. Findings carry a stable code, a severity, a subject and a fix.
"""

from __future__ import annotations

import difflib
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from urllib.parse import urlsplit

from pi_dispatch.audit.agents import agent_findings
from pi_dispatch.audit.cron import cron_drift_findings, cron_findings
from pi_dispatch.audit.drift import (
    clock_findings,
    draining_findings,
    idle_slot_findings,
    invalid_row_findings,
    live_findings,
    queue_findings,
)
from pi_dispatch.audit.egress import egress_findings
from pi_dispatch.audit.findings import CODES, SEVERITIES, Finding, Report, Severity
from pi_dispatch.audit.limits import limit_findings, live_limit_findings
from pi_dispatch.audit.sandbox import runtime_findings
from pi_dispatch.audit.store import store_findings
from pi_dispatch.config.hostvars import InventoryHost, host_problems
from pi_dispatch.config.rolevars import declared_whole
from pi_dispatch.core.capabilities import CAP_SECRET, DEFAULT_SECRET_TOKEN, job_needs, need_label, profile_variable
from pi_dispatch.core.reasons import Reason
from pi_dispatch.core.rehoming import rehome_after_ms
from pi_dispatch.core.routing import ABSTAIN_ALL_CAPABLE, ABSTAIN_NO_NEEDS, ABSTAIN_NONE_CAPABLE, RouteTable
from pi_dispatch.fleet.hosts import FleetHost, HostQueue
from pi_dispatch.fleet.registry import InvalidRow
from pi_dispatch.fleet.steal import Waiting
from pi_dispatch.fleet.storeview import StoreState
from pi_dispatch.triggers.file import Trigger
from pi_dispatch.triggers.schedules import CRON

__all__ = ["CODES", "SEVERITIES", "Finding", "Report", "Severity", "audit"]


def _refusal(need: str) -> Reason:
    """What a host that pops a job with this need, and lacks it, refuses the job as."""
    return Reason.SECRET_PROFILE_UNKNOWN if need.startswith(f"{CAP_SECRET}:") else Reason.WAIT_PROFILE_UNKNOWN


def _close_names(need: str, declared: Iterable[str]) -> str:
    kind, _, name = need.partition(":")
    pool = sorted({token.partition(":")[2] for token in declared if token.startswith(kind + ":")})
    close = [n for n in pool if n.lower() == name.lower()] or difflib.get_close_matches(name, pool, n=2, cutoff=0.6)
    return f"; did you mean {' or '.join(repr(n) for n in close)}?" if close else ""


# (code, message, fix, hosts, profile) of one placement verdict
Verdict = tuple[str, str, str, tuple[str, ...], str | None]


class _Placement:
    """Classifies needs against the fleet, memoised per distinct needs (triggers share a handful)."""

    def __init__(self, fleet: Sequence[FleetHost], down: set[str], liveness: Mapping[str, str]) -> None:
        self.fleet = fleet
        self.liveness = liveness
        self.up = [host for host in fleet if host.name not in down]
        self.declared_anywhere = frozenset().union(*(host.tokens for host in fleet))
        self.table = RouteTable([(frozenset(host.tokens), host.name, host.declared) for host in self.up])
        self.memo: dict[tuple[str, ...], list[Verdict]] = {}

    def classify(self, needs: tuple[str, ...]) -> list[Verdict]:
        if needs not in self.memo:
            self.memo[needs] = self._classify(needs)
        return self.memo[needs]

    def _classify(self, needs: tuple[str, ...]) -> list[Verdict]:
        """(code, message, fix, hosts, profile) for one set of needs."""
        return self._unserved(needs) or [self._placed(needs)]

    def _unserved(self, needs: tuple[str, ...]) -> list[Verdict]:
        """Each need that no host declares, or that only hosts now down declare."""
        out: list[Verdict] = []
        for need in needs:
            owners = tuple(host.name for host in self.fleet if need in host.tokens)
            if not owners:
                out.append(
                    (
                        "profile-undeclared",
                        f"needs {need_label(need)}, which no host declares; every delivery is refused "
                        f"({_refusal(need)}){_close_names(need, self.declared_anywhere)}",
                        f"declare it in a host's {profile_variable(need)}, or fix the trigger's name for it",
                        (),
                        need,
                    )
                )
            elif not any(host.name in owners for host in self.up):
                out.append(
                    (
                        "profile-hosts-down",
                        f"needs {need_label(need)}, declared only on {', '.join(owners)}, which "
                        f"{'is' if len(owners) == 1 else 'are'} down; deliveries are refused meanwhile",
                        "bring a host that declares it back, or declare it on another host",
                        owners,
                        need,
                    )
                )
        return out

    def _placed(self, needs: tuple[str, ...]) -> Verdict:
        """Where the jobs of needs every one of which some live host serves can run, and how they get there: the
        router's own decision (`core/routing.py`) over the hosts that are up, as each declares itself."""
        chosen = self.table.candidates(needs)
        profile = ",".join(needs)
        if chosen.abstention == ABSTAIN_NONE_CAPABLE:
            return (
                "needs-split",
                f"needs {', '.join(map(need_label, needs))}, but no single host that is up has all of them",
                "declare all of them on at least one host",
                (),
                profile,
            )
        if chosen.abstention in {ABSTAIN_ALL_CAPABLE, ABSTAIN_NO_NEEDS}:
            return (
                "profile-everywhere",
                "every host declares what it needs, so it stays on the shared queue",
                "",
                chosen.capable,
                profile,
            )
        names = ", ".join(chosen.capable)
        if chosen.abstention is not None:
            return (
                "profile-unroutable",
                f"only {names} can serve it and none declares a worker name, so it stays on "
                "the shared queue and hosts without the profile refuse it when they win the pop",
                f"give {names} a pi_dispatch_worker_name",
                chosen.capable,
                profile,
            )
        if len(chosen.routable) == 1:
            only = chosen.routable[0]
            live = f" ({self.liveness[only]})" if only in self.liveness else ""
            return (
                "profile-single-host",
                f"only {only} can take it{live}: a single point of failure",
                "declare the profile on a second named host",
                chosen.routable,
                profile,
            )
        return ("profile-routed", f"routed among {', '.join(chosen.routable)}", "", chosen.routable, profile)


def _placement_findings(
    triggers: Sequence[Trigger], fleet: Sequence[FleetHost], down: set[str], liveness: Mapping[str, str]
) -> list[Finding]:
    placement = _Placement(fleet, down, liveness)
    up = [host for host in fleet if host.name not in down]
    findings = []
    for trigger in triggers:
        if trigger.on_type == CRON:
            continue  # never routed: `cron_audit` judges it against the host whose file holds it
        needs = tuple(job_needs(trigger.run))
        if needs:
            for code, message, fix, hosts, profile in placement.classify(needs):
                findings.append(Finding(code, trigger.label, message, fix, hosts, profile, trigger.label))
        elif trigger.run.get("secrets") and not trigger.run.get("secretsProfile"):
            lacking = tuple(host.name for host in up if DEFAULT_SECRET_TOKEN not in host.tokens)
            if lacking:
                findings.append(
                    Finding(
                        "default-profile-missing",
                        trigger.label,
                        "binds secrets without secretsProfile, so it uses the `default` profile and is never "
                        f"routed; {', '.join(lacking)} lack it and refuse its deliveries",
                        "declare a `default` secret profile on every host, or set run.secretsProfile",
                        lacking,
                        DEFAULT_SECRET_TOKEN,
                        trigger.label,
                    )
                )
    return findings


def _config_findings(hosts: Sequence[InventoryHost], fleet: Sequence[FleetHost]) -> list[Finding]:
    findings = [
        Finding(
            "host-vars-invalid",
            f"host {host.name}",
            str(problem.subject) + ": " + problem.message,
            problem.fix,
            (host.name,),
        )
        for host in hosts
        for problem in host_problems(host)
    ]
    by_name: dict[str, list[str]] = defaultdict(list)
    for host in fleet:
        if host.declared:
            by_name[host.worker_name].append(host.name)
    findings += [
        Finding(
            "worker-name-duplicate",
            f"worker name {name!r}",
            f"declared by {', '.join(owners)}",
            "give each host its own pi_dispatch_worker_name",
            tuple(owners),
        )
        for name, owners in sorted(by_name.items())
        if len(owners) > 1
    ]
    by_folded: dict[tuple[str, str], set[str]] = defaultdict(set)
    for host in fleet:
        for token in host.tokens:
            kind, _, name = token.partition(":")
            by_folded[(kind, name.lower())].add(name)
    findings += [
        Finding(
            "profile-case-clash",
            f"profiles {', '.join(sorted(variants))}",
            "differ only by case",
            "use one spelling on every host and in every trigger",
            profile=sorted(variants)[0],
        )
        for variants in by_folded.values()
        if len(variants) > 1
    ]
    findings += _shared_value_findings(
        hosts, "logs_dir", "logs-dir-shared", "give each host its own logs_dir (or share on purpose)"
    )
    findings += _store_user_findings(hosts)
    findings += egress_findings(hosts)
    findings += limit_findings(hosts)
    zones = {str(host.declared("tz")) for host in hosts if host.declared("tz")}
    if len(zones) > 1:
        findings.append(
            Finding(
                "tz-mismatch", "inventory", f"hosts declare {', '.join(sorted(zones))}", "set the same tz on every host"
            )
        )
    return findings


def _store_user_findings(hosts: Sequence[InventoryHost]) -> list[Finding]:
    """Workers that present a password as the store's default user (their VALKEY_URL names no user of their own)."""
    shared = [
        host.name
        for host in hosts
        if host.declared("valkey_password") and not urlsplit(str(host.declared("valkey_url") or "")).username
    ]
    if not shared:
        return []
    fix = "give them a store user of their own: pi_dispatch_valkey_users and redis://pi-worker@... (docs/multi-host.md)"
    return [
        Finding(
            "store-user-shared",
            "store users",
            f"log in as the store's default user: {', '.join(shared)}",
            fix,
            tuple(shared),
        )
    ]


def _shared_value_findings(hosts: Sequence[InventoryHost], suffix: str, code: str, fix: str) -> list[Finding]:
    by_value: dict[str, list[str]] = defaultdict(list)
    for host in hosts:
        value = host.declared(suffix)
        if isinstance(value, str) and value:
            by_value[value].append(host.name)
    return [
        Finding(code, f"{suffix} {value}", f"shared by {', '.join(owners)}", fix, tuple(owners))
        for value, owners in sorted(by_value.items())
        if len(owners) > 1
    ]


def audit(
    hosts: Sequence[InventoryHost],
    triggers: Sequence[Trigger],
    *,
    live_rows: Sequence[Mapping[str, object]] | None = None,
    live_state: str = "off",
    simulate_down: Iterable[str] = (),
    host_queues: Sequence[HostQueue] = (),
    invalid_rows: Sequence[InvalidRow] = (),
    waiting: Sequence[Waiting] = (),
    now_ms: int = 0,
    host_triggers: Mapping[str, Sequence[Trigger]] | None = None,
    store: StoreState | None = None,
) -> Report:
    """The whole audit. live_rows None means --live was not asked for (or the registry was unreachable);
    waiting: the oldest jobs on each queue (`fleet/backlog.py`).
    host_triggers: each inventory host's own triggers file (its cron), by host name; store: the store's own state."""
    cron_files = host_triggers or {}
    fleet = [FleetHost.of_inventory(host) for host in hosts]
    down = set(simulate_down)
    findings = _config_findings(hosts, fleet) + agent_findings(hosts, triggers)
    liveness: dict[str, str] = {}
    if live_state.startswith("unreachable"):
        findings.append(
            Finding("registry-unreachable", "registry", live_state, "check VALKEY_URL and that the store is up")
        )
    if live_rows is not None:
        drift, live_down = live_findings(fleet, live_rows, liveness)
        findings += drift
        down |= live_down
        after = {
            host.worker_name: rehome_after_ms(inventory.declared("rehome_after_ms"))
            for host, inventory in zip(fleet, hosts, strict=True)
        }
        findings += queue_findings(host_queues, defaultdict(lambda: rehome_after_ms(None), after), now_ms)
        findings += draining_findings(live_rows, host_queues, now_ms)

        def declared(field: str) -> defaultdict[str, int]:  # each host's value, the default for one not listed
            found: defaultdict[str, int] = defaultdict(lambda: declared_whole(field, None))
            found.update(
                (host.worker_name, declared_whole(field, inventory.declared(field)))
                for host, inventory in zip(fleet, hosts, strict=True)
            )
            return found

        findings += idle_slot_findings(live_rows, waiting, declared("steal_after_ms"))
        findings += invalid_row_findings(invalid_rows)
        findings += clock_findings(live_rows, declared("clock_skew_max_ms"))
        findings += cron_drift_findings(hosts, fleet, live_rows, cron_files)
        findings += store_findings(store, now_ms)
        findings += runtime_findings(hosts, live_rows)
        findings += live_limit_findings(live_rows)
    findings += _placement_findings(triggers, fleet, down, liveness)
    findings += cron_findings(fleet, cron_files)
    order = {severity: rank for rank, severity in enumerate(SEVERITIES)}
    findings.sort(key=lambda f: (order[f.severity], f.code, f.subject))
    return Report(findings, live_state, sorted(set(simulate_down)), len(hosts), len(triggers))
