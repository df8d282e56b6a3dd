"""Azure DevOps, at `/azure`: its deliveries (`routes.py`), its shared secret, its identity and its membership
lookups (`access.py`)."""

from __future__ import annotations

from typing import Final

from pi_dispatch.receiver.forges.azure.access import arm, connect
from pi_dispatch.receiver.forges.azure.routes import (
    PR_EVENTS,
    AzureForge,
    _gate,
    _verify,
    extract_email,
    gate,
    parse_tags,
    project,
)
from pi_dispatch.receiver.forges.spec import AuthorityLookup, repo_target

__all__ = ["PR_EVENTS", "SPEC", "extract_email", "gate", "parse_tags", "project"]

SPEC: Final = AzureForge(
    name="azure",
    path="/azure",
    delivery_hint=lambda _headers: None,
    verify=_verify,
    authority=AuthorityLookup(
        "azure_membership_lookup_failed",
        "membership-lookup-failed",
        lambda p: (p.get("project", {}).get("id"), p["actor"]),
    ),
    gate=_gate,
    arm=arm,
    connect=connect,
    target=repo_target("azure"),
    internal_event="azure_verify_handler_error",
    internal_error="internal",
)
