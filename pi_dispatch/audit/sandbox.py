"""What the live audit says of the runtimes jobs run under (`core/runtimes.py`): a host whose row does not list a
runtime its inventory says it needs (its boot canary failed, or the runtime is not installed), and a profile whose
jobs must run under runsc where no live host can run them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pi_dispatch.audit.findings import Finding
from pi_dispatch.config.hostvars import InventoryHost
from pi_dispatch.core.capabilities import CAP_SECRET, CAP_WAIT, is_live, parse_caps
from pi_dispatch.core.runtimes import ROW_FIELD, RUNSC, row_runtimes
from pi_dispatch.fleet.hosts import FleetHost

FIX = (
    "install gVisor and register runsc with Docker on the host (pi_dispatch_worker_gvisor), then restart its worker; "
    "its log's runtime_unavailable line says what Docker answered"
)


def _needs(host: InventoryHost) -> dict[str, str]:
    """The runtimes a host's inventory says its jobs need, each with why."""
    needs: dict[str, str] = {}
    if (runtime := host.declared("job_runtime")) and isinstance(runtime, str):
        needs[runtime] = "pi_dispatch_worker_job_runtime"
    if host.declared("runsc_profiles"):
        needs.setdefault(RUNSC, "pi_dispatch_worker_runsc_profiles")
    return needs


def runtime_findings(hosts: Sequence[InventoryHost], live_rows: Sequence[Mapping[str, object]]) -> list[Finding]:
    rows = {str(row.get("name")): row for row in live_rows if is_live(row)}
    findings = []
    for host in hosts:
        row = rows.get(FleetHost.of_inventory(host).worker_name)
        have = row_runtimes(row.get(ROW_FIELD)) if row is not None else frozenset()
        findings += [
            Finding(
                "runtime-missing",
                f"host {host.name}",
                f"its jobs need the {name} runtime ({why}), and its row does not list it: its canary failed",
                FIX,
                (host.name,),
            )
            for name, why in sorted(_needs(host).items())
            if row is not None and name not in have
        ]
    wanted = sorted({str(name) for host in hosts for name in (host.declared("runsc_profiles") or ())})
    for profile in wanted:
        tokens = {f"{CAP_SECRET}:{profile}", f"{CAP_WAIT}:{profile}"}
        able = [
            name
            for name, row in rows.items()
            if RUNSC in row_runtimes(row.get(ROW_FIELD)) and tokens & parse_caps(row.get("caps"))
        ]
        if not able:
            findings.append(
                Finding(
                    "runsc-profile-unserved",
                    f"profile {profile!r}",
                    "its jobs run under runsc, and no live host both serves it and can run runsc: they wait",
                    FIX,
                    profile=profile,
                )
            )
    return findings
