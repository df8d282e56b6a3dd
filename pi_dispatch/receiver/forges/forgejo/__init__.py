"""Forgejo, at `/forgejo`: its deliveries (`routes.py`, signed as GitHub's are), its identity and its permission
lookups (`access.py`)."""

from __future__ import annotations

from typing import Final

from pi_dispatch.receiver.forges.forgejo.access import arm, connect
from pi_dispatch.receiver.forges.forgejo.routes import NOT_ACTIONABLE, _gate, gate, map_action, project
from pi_dispatch.receiver.forges.spec import AuthorityLookup, Forge, hub_hint, hub_verify

__all__ = ["NOT_ACTIONABLE", "SPEC", "gate", "map_action", "project"]

SPEC: Final = Forge(
    name="forgejo",
    path="/forgejo",
    delivery_hint=hub_hint,
    verify=hub_verify(project),
    authority=AuthorityLookup(
        "forgejo_permission_lookup_failed",
        "permission-lookup-failed",
        lambda p: (p["repository"]["full_name"], p["sender"]["login"]),
    ),
    gate=_gate,
    arm=arm,
    connect=connect,
)
