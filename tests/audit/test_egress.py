"""The audit's egress findings, from the inventory alone: a profile whose jobs reach different places depending on
the host they land on, and an allowlist entry that covers a public suffix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from pi_dispatch.audit.egress import egress_findings
from pi_dispatch.audit.findings import Finding
from pi_dispatch.config.hostvars import PREFIX, InventoryHost
from pi_dispatch.core.egress import STARTER_ALLOWLIST, parse_allowlist

ROLE_DEFAULTS = Path(__file__).parents[2] / "ansible" / "roles" / "pi_dispatch_worker" / "defaults" / "main.yml"


def host(name: str, **declared: Any) -> InventoryHost:
    return InventoryHost(name, {f"{PREFIX}name": name, **{PREFIX + key: value for key, value in declared.items()}}, "t")


def codes(findings: list[Finding]) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(finding.code, finding.subject, finding.hosts) for finding in findings]


def test_hosts_that_give_a_profile_the_same_reach_however_written_say_nothing() -> None:
    lists = {"deploy": ["api.example.com", ".cdn.example"]}
    same = {"deploy": [".cdn.example", "api.example.com", "api.example.com"]}
    hosts = [
        host("mini1", secret_profiles={"deploy": "/r"}, egress_profiles=lists),
        host("mini2", secret_profiles={"deploy": "/r"}, egress_profiles=same),
        host("mini3", wait_profiles={"ci": "/c"}, egress=False),  # serves nothing mini1 and mini2 do
    ]
    assert egress_findings(hosts) == []


def test_a_profile_whose_reach_depends_on_the_host_is_named_with_each_hosts_reach() -> None:
    hosts = [
        host("mini1", wait_profiles={"ci": "/c"}, egress_profiles={"ci": "offline"}),
        host("mini2", wait_profiles={"ci": "/c"}),  # the role's default list
        host("mini3", wait_profiles={"ci": "/c"}, egress=False),
        host("mini4", wait_profiles={"ci": "/c"}, egress_profiles={"ci": []}),  # offline too
    ]
    [finding] = egress_findings(hosts)
    assert (finding.code, finding.profile, finding.hosts) == ("egress-profile-differs", "ci", hosts_named(1, 2, 3, 4))
    assert "mini1, mini4: its own list: offline" in finding.message and "mini3: no egress control" in finding.message
    assert "mini2: the host's list: api.anthropic.com" in finding.message, finding.message


def test_a_wildcard_over_a_public_suffix_is_named_once_for_the_hosts_that_declare_it() -> None:
    wide = [".github.io", ".example.co.uk", ".co.uk", "raw.githubusercontent.com"]
    hosts = [
        host("mini1", egress_allowlist=wide, egress_profiles={"pages": [".s3.amazonaws.com"]}),
        host("mini2", egress_allowlist=wide),
    ]
    assert codes(egress_findings(hosts)) == [
        ("egress-public-suffix", "pi_dispatch_worker_egress_allowlist .co.uk", ("mini1", "mini2")),
        ("egress-public-suffix", "pi_dispatch_worker_egress_allowlist .github.io", ("mini1", "mini2")),
        ("egress-public-suffix", "pi_dispatch_worker_egress_profiles.pages .s3.amazonaws.com", ("mini1",)),
    ]


def test_the_role_default_list_is_the_starter_list_and_covers_no_public_suffix() -> None:
    defaults = yaml.safe_load(ROLE_DEFAULTS.read_text())["pi_dispatch_worker_egress_allowlist"]
    starter = parse_allowlist(STARTER_ALLOWLIST, "starter")
    assert parse_allowlist("\n".join(defaults), "defaults") == starter
    assert egress_findings([host("mini1")]) == []


def hosts_named(*numbers: int) -> tuple[str, ...]:
    return tuple(f"mini{number}" for number in numbers)
