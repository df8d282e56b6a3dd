"""What the audit says of the fleet's limits, from the inventory: hosts whose caps or limit files differ; and from the
live rows, hosts whose limits or dollar caps (`fpUsd`) differ.

The windows are the fleet's (every host counts its starts in the same `budget:*` keys), but each cap is the host's own
setting: with two hosts capping one day at 25 and 100, the fleet stops at 25 on one and at 100 on the other. The same
goes for a scope's row, and for the pause windows each host reads alone. A host that declares nothing has the
defaults; hosts are compared by what they run with.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence

from pi_dispatch.audit.findings import Finding
from pi_dispatch.config.hostvars import InventoryHost
from pi_dispatch.config.kinds import form_of
from pi_dispatch.config.worker_settings import WorkerSettings
from pi_dispatch.core.budget import LIMITS_ROW_FIELD, WINDOWS
from pi_dispatch.core.dollarplan import FPUSD_ROW_FIELD, spend_groups
from pi_dispatch.infra.valkey import reply_text

CAPS = (
    *(spec.cap_setting for spec in WINDOWS),
    "soft_hold_pct",
    "daily_token_cap",
    "max_cost_usd",
    *(spec.usd_setting for spec in WINDOWS),
)
FILES = ("scoped_limits", "pause_windows")


def _caps(host: InventoryHost) -> str:
    """What a host caps, each value as its env file would say it (`2.5` and `"2.50"` are one amount)."""
    fields = WorkerSettings.model_fields
    caps = {name: host.declared(name) if host.declared(name) is not None else fields[name].default for name in CAPS}
    return ", ".join(
        f"{name} {form_of(fields[name]).env_text(value) if value is not None else 'none'}"
        for name, value in caps.items()
    )


def _file(host: InventoryHost, name: str) -> str:
    declared = host.declared(name)
    return json.dumps(declared, sort_keys=True) if declared is not None else "none"


def _differing(hosts: Sequence[InventoryHost], subject: str, what: dict[str, str], fix: str) -> list[Finding]:
    return _differing_names({host.name: what[host.name] for host in hosts}, subject, fix)


def _differing_names(what: Mapping[str, str], subject: str, fix: str, code: str = "limits-differ") -> list[Finding]:
    by_value: dict[str, list[str]] = defaultdict(list)
    for name, value in what.items():
        by_value[value].append(name)
    if len(by_value) < 2:
        return []
    said = "; ".join(f"{', '.join(sorted(names))}: {value[:120]}" for value, names in sorted(by_value.items()))
    return [Finding(code, subject, said, fix, tuple(sorted(what)))]


def limit_findings(hosts: Sequence[InventoryHost]) -> list[Finding]:
    """Caps, scoped limits or pause windows that differ between the fleet's workers."""
    findings = _differing(
        hosts,
        "caps",
        {host.name: _caps(host) for host in hosts},
        "declare the caps once for every worker (group_vars: pi_dispatch_worker_daily_cap and the others)",
    )
    for name in FILES:
        findings += _differing(
            hosts,
            f"pi_dispatch_worker_{name}",
            {host.name: _file(host, name) for host in hosts},
            f"declare pi_dispatch_worker_{name} once, in group_vars, so every host reads the same",
        )
    return findings


def live_limit_findings(live_rows: Sequence[Mapping[str, object]]) -> list[Finding]:
    """Live hosts whose rows say they run with different limits (a row without `limits`, a Node host's or an older
    one's, says nothing)."""
    said = {str(row.get("name")): str(row[LIMITS_ROW_FIELD]) for row in live_rows if row.get(LIMITS_ROW_FIELD)}
    findings = _differing_names(
        said, "live rows", "roll the same caps and limit files out to every worker (the inventory's group_vars)"
    )
    return findings + spend_findings(live_rows)


def spend_findings(live_rows: Sequence[Mapping[str, object]]) -> list[Finding]:
    """Live hosts that cap dollars differently, as a Node doctor warns of them: their `fpUsd` differ, or one says
    none while another caps dollars."""
    groups = spend_groups({str(row.get("name")): reply_text(row.get(FPUSD_ROW_FIELD)) or None for row in live_rows})
    if not groups:
        return []
    said = "; ".join(f"{', '.join(names)}: {fingerprint}" for fingerprint, names in groups.items())
    fix = (
        "declare pi_dispatch_worker_max_cost_usd, the dollar windows and the dollar rows once for every worker "
        "(group_vars), and upgrade hosts that publish none"
    )
    hosts = tuple(sorted(name for names in groups.values() for name in names))
    return [Finding("spend-differs", "dollar caps (fpUsd)", said, fix, hosts)]
