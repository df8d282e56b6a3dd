"""A store that comes back without its data: noticed through the fleet's epoch, a key written once.

The first worker to find `fleet:epoch` absent writes it (SET NX) with the store's run id and the time; it lives as
long as the store's data does. Each worker reads it every beat: a key that is gone (or rewritten by a peer that
found it gone first) means the store lost everything since, the queues, the rows and the cron schedulers with it.
The worker then says so once (`store_reset`), writes the epoch again with the count of resets and when the last
one was (what `audit --live` reports), and re-creates what it owns; its row comes back with its next beat anyway.
A failover does not change the epoch: the replicas hold the key.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from pi_dispatch.core.keys import FLEET_EPOCH
from pi_dispatch.infra.events import EventLog, discard
from pi_dispatch.infra.valkey import OP_TIMEOUT_S, bounded, reply_text

if TYPE_CHECKING:
    import redis.asyncio as aioredis


@dataclass(frozen=True)
class FleetEpoch:
    """What `fleet:epoch` holds: the store's run id when it was written, since when, and the resets seen so far."""

    runId: str
    since: int
    resets: int = 0
    resetAt: int | None = None

    def text(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def read(cls, raw: object) -> FleetEpoch | None:
        """The epoch in a stored value, None for anything else (a hand-written or foreign value)."""
        try:
            found = json.loads(reply_text(raw))
            epoch = cls(str(found["runId"]), int(found["since"]), int(found.get("resets", 0)), found.get("resetAt"))
        except (ValueError, TypeError, KeyError, AttributeError):
            return None
        return epoch if epoch.resetAt is None or isinstance(epoch.resetAt, int) else None


@dataclass
class EpochWatch:
    """One process's view of the fleet's epoch; `check` each beat says whether the store lost its data since."""

    client: aioredis.Redis
    now: Callable[[], int]
    log: EventLog = discard
    seen: str | None = None  # the stored value last read

    async def check(self) -> bool:
        """True once per loss: the epoch is gone, or a peer that found it gone wrote another."""
        raw = await bounded(self.client.get(FLEET_EPOCH), OP_TIMEOUT_S)
        current = None if raw is None else reply_text(raw)
        if current is not None and (self.seen is None or current == self.seen):
            self.seen = current
            return False
        before = FleetEpoch.read(self.seen) if self.seen is not None else None
        if current is None:
            resets = before.resets + 1 if before is not None else int(self.seen is not None)
            current = await self._write(resets, self.now() if self.seen is not None else None)
        if self.seen is None:  # the first read of this process: a fresh store, nothing was lost that it knew of
            self.seen = current
            return False
        self.seen = current
        after = FleetEpoch.read(current)
        self.log("store_reset", {"runId": after.runId if after else None, "resets": after.resets if after else None})
        return True

    async def _write(self, resets: int, reset_at: int | None) -> str:
        """Write the epoch unless a peer just did; what the key then holds."""
        server = await bounded(self.client.info("server"), OP_TIMEOUT_S)
        run_id = str(server.get("run_id", "")) if isinstance(server, dict) else ""
        epoch = FleetEpoch(run_id, self.now(), resets, reset_at)
        await bounded(self.client.set(FLEET_EPOCH, epoch.text(), nx=True), OP_TIMEOUT_S)
        stored = await bounded(self.client.get(FLEET_EPOCH), OP_TIMEOUT_S)
        return epoch.text() if stored is None else reply_text(stored)
