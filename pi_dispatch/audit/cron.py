"""The audit of cron: where each host's cron jobs run, what would refuse them there, and live fpCron drift. Pure.

A host's cron entries come from its own triggers file (`pi_dispatch_worker_triggers_source`) and are never
routed: a named host schedules them on its own queue, so it must serve what they need itself; a nameless one
puts them on the shared queue, where any host may take them. With --live, each host's published `fpCron` is
compared with the fingerprint its inventory renders (its triggers file in its declared zone).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from pi_dispatch.audit.findings import Finding
from pi_dispatch.config.hostvars import InventoryHost
from pi_dispatch.core.capabilities import DEFAULT_SECRET_TOKEN, job_needs, need_label, profile_variable
from pi_dispatch.fleet.hosts import FleetHost
from pi_dispatch.triggers.file import Trigger
from pi_dispatch.triggers.schedules import authored_cron, cron_entries, cron_fingerprint, load_cron


def _cron_needs(trigger: Trigger) -> list[str]:
    needs = job_needs(trigger.run)
    if trigger.run.get("secrets") and not trigger.run.get("secretsProfile"):
        needs.append(DEFAULT_SECRET_TOKEN)  # a cron job is never routed, so `default` must be where it runs
    return needs


def cron_findings(fleet: Sequence[FleetHost], host_triggers: Mapping[str, Sequence[Trigger]]) -> list[Finding]:
    """Each cron entry against the host that schedules it: refused there, or put where any host may take it."""
    findings = []
    for host in fleet:
        entries = cron_entries(host_triggers.get(host.name, ()))
        if entries and not host.declared and len(fleet) > 1:
            findings.append(
                Finding(
                    "cron-shared",
                    f"host {host.name}",
                    f"schedules {len(entries)} cron entries without a worker name, so their jobs go to the shared "
                    "queue and any host may run them",
                    f"give {host.name} a pi_dispatch_worker_name",
                    (host.name,),
                )
            )
        for entry in entries:
            missing = [need for need in _cron_needs(entry) if need not in host.tokens]
            if missing and host.declared:
                findings.append(
                    Finding(
                        "cron-refused",
                        entry.label,
                        f"runs on {host.name}, whose triggers file holds it, which lacks "
                        f"{', '.join(map(need_label, missing))}: every run is refused there",
                        f"declare it in {host.name}'s {profile_variable(missing[0])}, or move the entry to the "
                        "triggers file of a host that has it",
                        (host.name,),
                        ",".join(missing),
                        entry.label,
                    )
                )
    return findings


def cron_drift_findings(
    hosts: Sequence[InventoryHost],
    fleet: Sequence[FleetHost],
    rows: Sequence[Mapping[str, object]],
    host_triggers: Mapping[str, Sequence[Trigger]],
) -> list[Finding]:
    """A live host whose `fpCron` is not what its inventory renders: another file, another zone, or a file it
    could not reload."""
    live = {str(row.get("name")): row for row in rows}
    findings = []
    for inventory, host in zip(hosts, fleet, strict=True):
        row = live.get(host.worker_name)
        if row is None:
            continue
        zone = str(inventory.declared("tz") or row.get("tz") or "")
        triggers = host_triggers.get(host.name)
        expected = cron_fingerprint(authored_cron(triggers) if triggers is not None else None, zone)
        published = str(row.get("fpCron") or "")
        if published == expected:
            continue
        said = f"publishes fpCron {published or '(none: cron disabled)'} ({row.get('cronCount') or 0} schedules)"
        renders = f"{expected} ({len(cron_entries(triggers))} schedules)" if triggers is not None else "no cron"
        findings.append(
            Finding(
                "cron-drift",
                f"host {host.name}",
                f"{said}; the inventory renders {renders}",
                "roll the inventory out again (the worker reloads its triggers file when it changes); if it persists, "
                "look for schedules_reload_invalid in journalctl -u pi-dispatch-worker",
                (host.name,),
            )
        )
    return findings


def hosts_cron(
    hosts: Iterable[InventoryHost], advance: Callable[[], object] = lambda: None
) -> dict[str, list[Trigger]]:
    """Each inventory host's own triggers file, loaded as its worker loads it, by host name (hosts without one are
    left out). Raises ConfigError naming a file that is missing or does not load."""
    found = {}
    for host in hosts:
        if (source := host.triggers_source) is not None:
            found[host.name] = load_cron(source, str(source))[1]
            advance()
    return found
