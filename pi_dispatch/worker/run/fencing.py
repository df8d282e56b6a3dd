"""Fencing: a worker that cannot prove it still holds a job's lock kills that job's container in time.

BullMQ hands a job to another worker once its lock has expired. This watcher reads the lock (its value and
its remaining life) every eighth of the lock duration, and renews it when BullMQ's own renewal has lapsed (a full
store refuses BullMQ's renewal but not this one). A lock gone or holding another token fences the job at once; a
lock that cannot be read (the store is away) fences it a quarter of the lock duration before the last proven
expiry, so the container is dead before anyone else may start the job. Each proof is measured from when its
request was sent, so a slow answer only makes the deadline earlier.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from pi_dispatch.core.keys import bull_key
from pi_dispatch.infra.valkey import STORE_FAULTS, bounded, packaged_script

if TYPE_CHECKING:
    import redis.asyncio as aioredis

CHECKS_PER_LOCK: Final = 8
MARGIN_FRACTION: Final = 0.25
# BullMQ renews a lock at half its life; one found below this has missed that renewal (a full store refuses
# BullMQ's SET), and the fence renews it itself (`lua/fence.lua`) before its margin is reached.
RENEW_BELOW: Final = 0.375


@dataclass
class LockFence:
    """Watches one job's lock; `lost` is set, with `reason`, when the worker can no longer prove it holds it."""

    client: aioredis.Redis
    queue: str
    job_id: str
    token: str
    lock_duration_ms: int
    monotonic: Callable[[], float] = time.monotonic
    lost: asyncio.Event = field(default_factory=asyncio.Event)
    reason: str = ""

    async def watch(self) -> None:
        """Run until the lock is lost (then return) or the task is cancelled (the job ended)."""
        lock_s = self.lock_duration_ms / 1000
        interval, margin = lock_s / CHECKS_PER_LOCK, lock_s * MARGIN_FRACTION
        proven_until = self.monotonic() + lock_s  # BullMQ took the lock for a full duration just now
        key = bull_key(self.queue, f"{self.job_id}:lock")
        script: Any = self.client.register_script(packaged_script("fence"))  # its SHA, computed here: no round trip
        keys = [key, bull_key(self.queue, "stalled")]
        arguments = [self.token, self.lock_duration_ms, self.job_id, int(self.lock_duration_ms * RENEW_BELOW)]
        while True:
            await asyncio.sleep(interval)
            sent = self.monotonic()
            try:
                value, remaining_ms = await bounded(script(keys, arguments), max(interval, 0.5))
            except STORE_FAULTS:
                value, remaining_ms = b"?", None  # unreadable: nothing proven, nothing disproven
            if value is None:
                return self._fence("lock-gone")
            if value != b"?":
                if (value.decode() if isinstance(value, bytes) else value) != self.token:
                    return self._fence("lock-taken")
                if isinstance(remaining_ms, int) and remaining_ms > 0:
                    proven_until = sent + remaining_ms / 1000
            if self.monotonic() >= proven_until - margin:
                return self._fence("lock-unproven")

    def _fence(self, reason: str) -> None:
        self.reason = reason
        self.lost.set()
