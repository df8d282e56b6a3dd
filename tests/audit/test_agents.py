"""The audit of what hosts give their jobs' agents: a provider key, each forge's credentials, one contract."""

from __future__ import annotations

import json
from typing import Any

from pi_dispatch.audit.agents import agent_findings
from pi_dispatch.config.hostvars import PREFIX, InventoryHost
from pi_dispatch.triggers.file import parse_triggers


def host(name: str, **declared: Any) -> InventoryHost:
    return InventoryHost(name, {f"{PREFIX}name": name, **{PREFIX + key: value for key, value in declared.items()}}, "t")


TRIGGERS = parse_triggers(
    json.dumps(
        {
            "triggers": [
                {"on": {"type": "label", "any": ["pi"]}, "run": {"kind": "github", "flow": "fix"}},
                {"on": {"type": "label", "any": ["pi"]}, "run": {"kind": "gitlab", "flow": "fix"}},
            ]
        }
    ),
    "triggers.json",
)


def codes(hosts: list[InventoryHost]) -> list[tuple[str, tuple[str, ...], str]]:
    return [(finding.code, finding.hosts, finding.message) for finding in agent_findings(hosts, TRIGGERS)]


def test_a_host_with_what_its_jobs_need_has_no_finding() -> None:
    ready = host(
        "mini1",
        provider_keys={"ANTHROPIC_API_KEY": "sk"},
        github_auth_source="app",
        github_app_id="1",
        github_app_installation_id="2",
        github_app_private_key_path="/etc/pi-dispatch/app.pem",
        gitlab_token="t",
        gitlab_url="https://gitlab.example",
    )
    assert codes([ready]) == []


def test_missing_keys_and_credentials_are_named() -> None:
    found = codes([host("mini1", github_auth_source="pat", provider="openai")])
    assert [(code, hosts) for code, hosts, _ in found] == [
        ("provider-key-missing", ("mini1",)),
        ("forge-credentials-missing", ("mini1",)),
        ("forge-credentials-missing", ("mini1",)),
    ]
    assert "openai" in found[0][2] and "pi_dispatch_worker_github_pat" in found[1][2]
    assert "pi_dispatch_worker_gitlab_token, pi_dispatch_worker_gitlab_url" in found[2][2]


def test_an_event_host_needs_nothing_but_a_mixed_fleet_is_said() -> None:
    event = host("mini2", job_contract="event")
    assert codes([event]) == []
    ready = host("mini1", provider_keys={"ANTHROPIC_API_KEY": "sk"}, gitlab_token="t", gitlab_url="https://g")
    assert [(code, hosts) for code, hosts, _ in codes([ready, event])] == [("job-contract-mixed", ("mini2",))]
