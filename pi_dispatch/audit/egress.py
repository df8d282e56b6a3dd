"""What the audit says of the fleet's egress, from the inventory: a profile whose jobs reach different places
depending on the host they land on, and an allowlist entry that covers a public suffix.

A host's egress for a profile is the profile's own list (`pi_dispatch_worker_egress_profiles`; `offline` for none),
else the host's list (`pi_dispatch_worker_egress_allowlist`, the role's default when it declares none), else none at
all with egress control off. Lists are compared by what they allow, not how they are written.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from pi_dispatch.audit.findings import Finding
from pi_dispatch.config.hostvars import InventoryHost
from pi_dispatch.core.egress import OFFLINE, STARTER_ALLOWLIST, Allowlist, parse_allowlist
from pi_dispatch.core.errors import ConfigError
from pi_dispatch.infra.publicsuffix import WILDCARD_FIX, public_suffix_wildcards

UNCONTROLLED = "no egress control (pi_dispatch_worker_egress false)"


def _allowlist(entries: object) -> Allowlist | None:
    """The list the inventory declares (None: not a list, or one `host-vars-invalid` reports)."""
    if entries == OFFLINE:
        return Allowlist()
    if not isinstance(entries, list) or not all(isinstance(entry, str) for entry in entries):
        return None
    try:
        return parse_allowlist("\n".join(entries), "the inventory")
    except ConfigError:
        return None


def _host_list(host: InventoryHost) -> Allowlist | None:
    declared = host.declared("egress_allowlist")
    return _allowlist(declared) if declared is not None else parse_allowlist(STARTER_ALLOWLIST, "the role's default")


def _said(allowlist: Allowlist) -> str:
    if not allowlist.destinations:
        return "offline"
    return ", ".join(sorted(f"{d.written}" + (f":{d.port}" if d.port != 443 else "") for d in allowlist.destinations))


def _egress_of(host: InventoryHost, profile: str) -> str | None:
    """What a job binding `profile` may reach on `host`, in words that compare equal when the reach is the same."""
    own = host.declared("egress_profiles")
    if isinstance(own, dict) and profile in own:
        found = _allowlist(own[profile])
        return f"its own list: {_said(found)}" if found is not None else None
    if host.declared("egress") is False:
        return UNCONTROLLED
    found = _host_list(host)
    return f"the host's list: {_said(found)}" if found is not None else None


def _differing(hosts: Sequence[InventoryHost]) -> list[Finding]:
    by_profile: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for host in hosts:
        for profile in sorted({*host.secret_profiles, *host.wait_profiles}):
            if (reach := _egress_of(host, profile)) is not None:
                by_profile[profile][reach].append(host.name)
    return [
        Finding(
            "egress-profile-differs",
            f"profile {profile!r}",
            "; ".join(f"{', '.join(names)}: {reach}" for reach, names in sorted(reaches.items())),
            "give the profile the same list on every host that serves it (pi_dispatch_worker_egress_profiles), or "
            "the same host list and egress switch",
            tuple(sorted(name for names in reaches.values() for name in names)),
            profile=profile,
        )
        for profile, reaches in sorted(by_profile.items())
        if len(reaches) > 1
    ]


def _wildcards(hosts: Sequence[InventoryHost]) -> list[Finding]:
    by_entry: dict[tuple[str, str], list[str]] = defaultdict(list)
    for host in hosts:
        lists = {"pi_dispatch_worker_egress_allowlist": _host_list(host)}
        own = host.declared("egress_profiles")
        if isinstance(own, dict):
            lists |= {f"pi_dispatch_worker_egress_profiles.{name}": _allowlist(e) for name, e in own.items()}
        for where, allowlist in lists.items():
            for entry in public_suffix_wildcards(allowlist) if allowlist is not None else []:
                by_entry[(entry, where)].append(host.name)
    return [
        Finding(
            "egress-public-suffix",
            f"{where} {entry}",
            "covers a public suffix: anyone may register a name under it and receive what a job sends there",
            WILDCARD_FIX,
            tuple(names),
        )
        for (entry, where), names in sorted(by_entry.items())
    ]


def egress_findings(hosts: Sequence[InventoryHost]) -> list[Finding]:
    """The inventory's egress findings: differing reach per profile, and public-suffix wildcards."""
    return _differing(hosts) + _wildcards(hosts)
