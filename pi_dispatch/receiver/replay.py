"""A signed delivery replayed: GitHub and Forgejo sign the body only, never the delivery id or the event name, so
whoever captured one delivery can send its body again under a new id (a new job once the first has finished) or
under another event name. The receiver remembers each signature for the deduplication window (`DEDUP_TTL_MS`) with
the delivery id it first came with, in one `SET NX GET` (Valkey, or Redis 7): the same body under another id in the
window is answered as deduplicated and starts nothing; the same id again (a forge's own redelivery, after a 503) is
served as before. Only a digest of the signature is stored, never the body.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from pi_dispatch.core.jobs import DEDUP_TTL_MS
from pi_dispatch.core.keys import delivery_seen_key

if TYPE_CHECKING:
    import redis.asyncio as aioredis

SEEN_MAX_ID: Final = 128  # a delivery id is a GUID; a longer header is cut, never stored whole


@dataclass(frozen=True)
class ReplayGuard:
    """The store the signatures are remembered in."""

    client: aioredis.Redis
    window_ms: int = DEDUP_TTL_MS

    async def replayed(self, forge: str, signature: str, delivery: str) -> bool:
        """Whether this signed body came before, in the window, under another delivery id (raises the store's
        error: the caller decides what an outage means)."""
        digest = hashlib.sha256(f"{forge}\n{signature}".encode()).hexdigest()
        first = await self.client.set(
            delivery_seen_key(digest), delivery[:SEEN_MAX_ID], nx=True, px=self.window_ms, get=True
        )
        return first is not None and first.decode(errors="replace") != delivery[:SEEN_MAX_ID]
