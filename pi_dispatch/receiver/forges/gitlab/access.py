"""GitLab's access: its declared webhook mode (Standard Webhooks signatures with a replay window, or a shared
token), how it is armed from the settings, the harness's own user id, and a user's access level on a project.

Every comparison is constant-time. A mode is declared, never negotiated: a delivery carrying the other mode's
credential is refused even when that credential is right.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal, cast

from pi_dispatch.core.errors import ConfigError, Problem
from pi_dispatch.core.jscompat import is_integer, js_number
from pi_dispatch.forgeapi.common import forge_setting, id_of, root_url, secret_of
from pi_dispatch.forgeapi.errors import ForgeCallError
from pi_dispatch.forgeapi.http import ForgeClient
from pi_dispatch.infra.events import EventLog
from pi_dispatch.receiver.forges.authority import Authority, Undecided
from pi_dispatch.receiver.forges.spec import Arming, Retried, Served

GITLAB_MODES: Final = ("signature", "token")
REPLAY_WINDOW_S: Final = 300
WHSEC_PREFIX: Final = "whsec_"
DEVELOPER: Final = 30


def _digest_equal(presented: str, expected: str) -> bool:
    """Compare SHA-256 digests, so neither the content nor the length of a token leaks through timing."""
    return hmac.compare_digest(hashlib.sha256(presented.encode()).digest(), hashlib.sha256(expected.encode()).digest())


def _base64(text: str) -> bytes:
    """Lenient base64 as Node's Buffer reads it: padding optional; undecodable text reads as nothing."""
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return b""


def gitlab_signing_key(secret: str) -> bytes:
    """The Standard Webhooks key: the secret minus an optional `whsec_`, base64-decoded."""
    return _base64(secret.removeprefix(WHSEC_PREFIX))


@dataclass(frozen=True)
class GitLabVerifier:
    """GitLab's declared mode: Standard Webhooks signatures with a replay window, or a shared token."""

    mode: Literal["signature", "token"]
    secret: str
    key: bytes = b""

    @classmethod
    def build(cls, mode: str, secret: str) -> GitLabVerifier:
        if mode not in GITLAB_MODES:
            raise ConfigError([Problem("GITLAB_WEBHOOK_MODE", "must be signature or token", fix="declare one")])
        if mode == "token":
            if not secret:
                raise ConfigError([Problem("GITLAB_WEBHOOK_SECRET", "is empty", fix="set the webhook's secret token")])
            return cls("token", secret)
        key = gitlab_signing_key(secret)
        if not key:
            raise ConfigError(
                [Problem("GITLAB_WEBHOOK_SECRET", "is not a base64 signing key", fix="paste GitLab's whsec_ token")]
            )
        return cls("signature", secret, key)

    def refusal(self, headers: Mapping[str, str], body: bytes, now_s: float) -> str | None:
        """None when the delivery is GitLab's, else the 401 error text."""
        if self.mode == "token":
            token = headers.get("X-Gitlab-Token", "")
            if not token:
                return "missing token"
            return None if _digest_equal(token, self.secret) else "invalid token"
        ident, stamp, signatures = (
            headers.get(name) for name in ("webhook-id", "webhook-timestamp", "webhook-signature")
        )
        if not ident or not stamp or not signatures:
            return "missing signature"
        seconds = js_number(stamp)
        if not math.isfinite(seconds) or abs(now_s - seconds) > REPLAY_WINDOW_S:
            return "stale or invalid timestamp"
        signed = ident.encode() + b"." + stamp.encode() + b"." + body
        expected = hmac.new(self.key, signed, hashlib.sha256).digest()
        for entry in signatures.split(" "):
            version, _, value = entry.partition(",")
            if version != "v1" or not value:
                continue
            presented = _base64(value)
            if len(presented) == len(expected) and hmac.compare_digest(presented, expected):
                return None
        return "invalid signature"


@dataclass(frozen=True)
class GitLabArm:
    verifier: GitLabVerifier
    token: str
    url: str


def arm(arming: Arming) -> GitLabArm | None:
    """Armed when any of its variables is set, and then requiring all of them."""
    settings = arming.settings
    secret, token, mode = (
        secret_of(forge_setting(settings, "GITLAB_WEBHOOK_SECRET")),
        secret_of(forge_setting(settings, "GITLAB_TOKEN")),
        forge_setting(settings, "GITLAB_WEBHOOK_MODE"),
    )
    if not (mode or secret or token):
        return None
    named = {"GITLAB_WEBHOOK_MODE": mode, "GITLAB_WEBHOOK_SECRET": secret.strip(), "GITLAB_TOKEN": token.strip()}
    if not arming.require(named, "GitLab") or mode is None:
        return None
    try:
        verifier = GitLabVerifier.build(mode, secret)
    except ConfigError as error:
        arming.problems.extend(Problem(p.subject, p.message, arming.source, p.fix) for p in error.problems)
        return None
    return GitLabArm(verifier, token, root_url(forge_setting(settings, "GITLAB_URL")))


async def gitlab_identity(arm: GitLabArm, client: ForgeClient) -> int:
    return id_of(await client.get(f"{arm.url}/api/v4/user", {"PRIVATE-TOKEN": arm.token}), "GitLab GET /user")


async def gitlab_access(arm: GitLabArm, client: ForgeClient, project_id: object, user_id: object) -> Authority:
    """Whether the user is a Developer or more on the project, membership through groups included."""
    if not is_integer(project_id) or not is_integer(user_id):
        return False
    project, user = int(cast(float, project_id)), int(cast(float, user_id))  # integral numbers, checked above
    url = f"{arm.url}/api/v4/projects/{project}/members/all/{user}"
    try:
        answer = await client.get(url, {"PRIVATE-TOKEN": arm.token})
    except ForgeCallError as error:
        return Undecided(error.reason)
    if answer.status == 404:
        return False
    if not answer.ok:
        return Undecided(f"members lookup returned {answer.status}")
    level = answer.body.get("access_level") if isinstance(answer.body, dict) else None
    if not answer.readable or not is_integer(level):
        return Undecided("members lookup answer has no access level")
    return bool(level >= DEVELOPER)  # type: ignore[operator]


async def connect(arm: GitLabArm, client: ForgeClient, retried: Retried, log: EventLog) -> Served:
    """Its own user id (retried within the window), and the lookup of each delivery's actor."""
    identity = await retried("gitlab", lambda: gitlab_identity(arm, client))
    log("self_identity", {"forge": "gitlab", "id": identity, "mode": arm.verifier.mode})
    return Served(arm.verifier, identity, functools.partial(gitlab_access, arm, client))
