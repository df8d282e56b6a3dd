"""Who sent a delivery: GitHub's and Forgejo's HMAC, GitLab's declared mode, Azure's shared secret. Pure.

Every comparison is constant-time. A mode is declared, never negotiated: a delivery carrying the other mode's
credential is refused even when that credential is right.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from pi_dispatch.core.errors import ConfigError, Problem
from pi_dispatch.core.jscompat import js_number, js_trim

SIGNATURE_PREFIX: Final = "sha256="
GITLAB_MODES: Final = ("signature", "token")
AZURE_MODES: Final = ("basic", "header")
REPLAY_WINDOW_S: Final = 300
WHSEC_PREFIX: Final = "whsec_"


def hub_signature(secret: bytes, body: bytes) -> str:
    """The `X-Hub-Signature-256` value GitHub and Forgejo send for body."""
    return SIGNATURE_PREFIX + hmac.new(secret, body, hashlib.sha256).hexdigest()


def hub_signature_valid(secret: bytes, body: bytes, header: str) -> bool:
    """`sha256=` and 32 hex-encoded bytes (either case) equal to the body's HMAC-SHA256 under secret."""
    if not header.startswith(SIGNATURE_PREFIX):
        return False
    try:
        presented = bytes.fromhex(header[len(SIGNATURE_PREFIX) :])
    except ValueError:
        return False
    if len(presented) != hashlib.sha256().digest_size:
        return False
    return hmac.compare_digest(presented, hmac.new(secret, body, hashlib.sha256).digest())


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


def secret_equals(presented: str, expected: str) -> bool:
    """Byte equality of two UTF-8 strings in constant time; different lengths are unequal, never an error."""
    left, right = presented.encode(), expected.encode()
    return len(left) == len(right) and hmac.compare_digest(left, right)


@dataclass(frozen=True)
class AzureVerifier:
    """Azure DevOps' shared secret: `Authorization: Basic <secret>` or a named header; no HMAC, no replay window."""

    mode: str
    secret: str
    header: str = ""

    def accepts(self, headers: Mapping[str, str]) -> bool:
        if self.mode == "basic":
            authorization = headers.get("Authorization", "")
            return authorization.startswith("Basic ") and secret_equals(js_trim(authorization[6:]), self.secret)
        if self.mode == "header" and self.header:
            return secret_equals(headers.get(self.header, ""), self.secret)
        return False
