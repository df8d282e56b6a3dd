"""GitLab, at `/gitlab`: its deliveries (`routes.py`), its webhook modes, its identity and its access lookups
(`access.py`)."""

from __future__ import annotations

from typing import Final

from pi_dispatch.receiver.forges.gitlab.access import arm, connect
from pi_dispatch.receiver.forges.gitlab.routes import MR_ACTIONS, _delivery_id, _gate, _verify, gate, project
from pi_dispatch.receiver.forges.spec import AuthorityLookup, Forge, repo_target

__all__ = ["MR_ACTIONS", "SPEC", "gate", "project"]

SPEC: Final = Forge(
    name="gitlab",
    path="/gitlab",
    delivery_hint=_delivery_id,
    verify=_verify,
    authority=AuthorityLookup(
        "gitlab_access_lookup_failed", "access-lookup-failed", lambda p: (p["project"]["id"], p["user"]["id"])
    ),
    gate=_gate,
    arm=arm,
    connect=connect,
    target=repo_target("gitlab"),
    internal_event="gitlab_verify_handler_error",
)
