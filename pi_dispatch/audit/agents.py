"""The audit of what each host gives its jobs' agents under the reference's contract: a key for its provider, and
credentials for every forge the triggers fire jobs for. A host short of one refuses those jobs before any spend
(`provider-unconfigured`, `config-refused`), so the audit says so before the rollout does. Pure over the inventory
and the triggers."""

from __future__ import annotations

from collections.abc import Sequence

from pi_dispatch.audit.findings import Finding
from pi_dispatch.config.hostvars import InventoryHost
from pi_dispatch.core.forges import FORGES
from pi_dispatch.core.providers import key_candidates
from pi_dispatch.triggers.file import Trigger

# A forge's credentials on a host, as its variables name them (GitHub's by its auth source)
FORGE_CREDENTIALS = {
    "gitlab": ("gitlab_token", "gitlab_url"),
    "forgejo": ("forgejo_token", "forgejo_url"),
    "azure": ("azure_token", "azure_org_url"),
}
GITHUB_CREDENTIALS = {
    "app": ("github_app_id", "github_app_installation_id"),
    "pat": ("github_pat",),
    "gh": (),  # the gh CLI's own login, which the inventory cannot see
}


def _reference(host: InventoryHost) -> bool:
    return (host.declared("job_contract") or "reference") == "reference"


def _missing(host: InventoryHost, kind: str) -> list[str]:
    if kind == "github":
        source = str(host.declared("github_auth_source") or "gh")
        needed = list(GITHUB_CREDENTIALS.get(source, ()))
        if source == "app" and not (
            host.declared("github_app_private_key") or host.declared("github_app_private_key_path")
        ):
            needed.append("github_app_private_key_path")
    else:
        needed = list(FORGE_CREDENTIALS.get(kind, ()))
    return [f"pi_dispatch_worker_{name}" for name in needed if not host.declared(name)]


def agent_findings(hosts: Sequence[InventoryHost], triggers: Sequence[Trigger]) -> list[Finding]:
    """Hosts whose jobs would be refused for want of a provider key or a forge's credentials, and a fleet whose
    hosts give jobs different contracts."""
    findings = []
    kinds = sorted({str(trigger.run.get("kind")) for trigger in triggers if trigger.run.get("kind") in FORGES})
    reference = [host for host in hosts if _reference(host)]
    for host in reference:
        provider = str(host.declared("provider") or "anthropic")
        keys = host.declared("provider_keys") or {}
        wanted = key_candidates(provider)
        if wanted and not any(name in keys for name in wanted):
            fix = f"give it pi_dispatch_worker_provider_keys: {{{wanted[-1]}: ...}} (from a vault)"
            message = f"no key for its provider {provider}: its jobs are refused provider-unconfigured"
            findings.append(Finding("provider-key-missing", f"host {host.name}", message, fix, (host.name,)))
        for kind in kinds:
            if missing := _missing(host, kind):
                message = f"{kind} jobs are refused config-refused: {', '.join(missing)} not declared"
                fix = "declare them (docs/multi-host.md §15), or keep the forge's jobs off this host"
                findings.append(Finding("forge-credentials-missing", f"host {host.name}", message, fix, (host.name,)))
    if reference and len(reference) < len(hosts):
        event = sorted(host.name for host in hosts if not _reference(host))
        message = f"{', '.join(event)} give jobs only their event (PI_JOB_CONTRACT=event); the rest the reference's"
        fix = "give every host the same pi_dispatch_worker_job_contract: a job's container differs by host"
        findings.append(Finding("job-contract-mixed", "job contract", message, fix, tuple(event)))
    return findings
