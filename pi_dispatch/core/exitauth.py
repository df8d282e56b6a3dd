"""The signed exit line (upstream-limits §2.2): an image whose `dev.pi-dispatch.capabilities` label says `exitAuth`
is handed a key for the attempt on its stdin (`PI_EXIT_AUTH=stdin`), and its runner signs the exit line with it, so
a job cannot write a line of its own that the worker believes (a forged cost would settle a dollar hold low).

The key is 32 random bytes as 64 lowercase hex; the signature is HMAC-SHA256 keyed by those 64 characters as text
over the UTF-8 bytes of the unsigned line, as lowercase hex, and it is always the line's last key: the line's
closing `}` becomes `,"auth":"<mac>"}`. The signed bytes are recovered by cutting that fixed-length suffix, never
by writing the JSON again. Only lines that verify are read; a line glued after stray bytes still verifies. Pure.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from typing import Final

EXIT_AUTH_CAPABILITY: Final = "exitAuth"
COST_CAP_CAPABILITY: Final = "costCap"
CAPABILITIES_LABEL: Final = "dev.pi-dispatch.capabilities"
EXIT_AUTH_VARIABLE: Final = "PI_EXIT_AUTH"
EXIT_AUTH_CHANNEL: Final = "stdin"
_ANCHOR: Final = '{"event":"'
_SIGNED: Final = re.compile(r',"auth":"([0-9a-f]{64})"\}\Z')
VERIFIED, UNVERIFIED = "verified", "unverified"


def new_exit_key() -> str:
    """A key for one attempt: 32 random bytes as 64 lowercase hex."""
    return secrets.token_hex(32)


def image_capabilities(labels: object) -> frozenset[str] | None:
    """The capability tokens an image's labels declare (a comma list), empty when it declares none; None when its
    labels are not known (the image is not here, or Docker did not answer: the container's start will say)."""
    if labels is None:
        return None
    value = labels.get(CAPABILITIES_LABEL) if isinstance(labels, dict) else None
    if not isinstance(value, str):
        return frozenset()
    return frozenset(token.strip() for token in value.split(",") if token.strip())


def signature(key: str, body: str) -> str:
    return hmac.new(key.encode(), body.encode(), hashlib.sha256).hexdigest()


def signed_line(key: str, body: str) -> str:
    """The line a runner writes for `body` (a JSON object ending in `}`) under `key`."""
    return f'{body[:-1]},"auth":"{signature(key, body)}"}}'


def _verified(candidate: str, key: str) -> str | None:
    found = _SIGNED.search(candidate)
    if found is None:
        return None
    body = candidate[: found.start()] + "}"
    return body if hmac.compare_digest(signature(key, body), found[1]) else None


def authentic_exit_lines(text: str, key: str | None) -> str:
    """The lines of `text` that verify under `key`, in order, each without its signature; "" without a key."""
    if not key:
        return ""
    kept: list[str] = []
    for raw in text.split("\n"):
        line = raw.strip()
        start = 0
        while start != -1:
            if (body := _verified(line[start:], key)) is not None:
                kept.append(body)
                break
            start = line.find(_ANCHOR, start + 1)
    return "\n".join(kept)
