"""The signature GitHub and Forgejo both send (`X-Hub-Signature-256`), checked in constant time. Pure. Each other
forge's own verification is in its package (`forges/<forge>/access.py`).
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Final

SIGNATURE_PREFIX: Final = "sha256="


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
