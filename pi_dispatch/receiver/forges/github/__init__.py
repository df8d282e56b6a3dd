"""GitHub: the default endpoint (every path no other forge claims). Its deliveries (`routes.py`), its tokens, its
identity and its permission lookups (`access.py`)."""

from __future__ import annotations

from typing import Final

from pi_dispatch.receiver.forges.github.access import arm, connect
from pi_dispatch.receiver.forges.github.routes import (
    PR_ACTIONS,
    _gate,
    gate,
    project,
    wants_sender_authority,
)
from pi_dispatch.receiver.forges.spec import AuthorityLookup, Forge, hub_hint, hub_verify

__all__ = ["PR_ACTIONS", "SPEC", "gate", "project", "wants_sender_authority"]

SPEC: Final = Forge(
    name="github",
    path=None,
    delivery_hint=hub_hint,
    verify=hub_verify(project),
    authority=AuthorityLookup(
        "github_permission_lookup_failed",
        "permission-lookup-failed",
        lambda p: (p["repository"]["full_name"], p["sender"]["login"]),
        needed=lambda d, rules, flows, self_id: wants_sender_authority(d.event, d.payload, rules, flows, self_id),
    ),
    gate=_gate,
    arm=arm,
    connect=connect,
    early=True,
    unarmed="no GitHub trigger in the triggers file, and GITHUB_AUTH_SOURCE is not set",
)
