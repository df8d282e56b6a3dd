"""A store that is full is told apart from one that is away.

Under `maxmemory` with `noeviction` the store answers every read and refuses each write that would grow it
("OOM command not allowed"). Read as an outage, that fenced running jobs, ended the worker every half minute and
logged two thousand errors a minute. Here: the registry's beat says when the store refuses for memory; the
worker then takes no new job, its lock fences keep running jobs' locks (`fencing.py`, with a write that frees
nothing and so is allowed), their records' mirrors wait (`history.py`), it does not exit, and this watch says
so once a minute with the store's used and max memory, counting the refusals in between instead of logging each.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from pi_dispatch.infra.events import EventLog
from pi_dispatch.infra.valkey import STORE_FAULTS, bounded, out_of_memory

if TYPE_CHECKING:
    import redis.asyncio as aioredis

LOG_INTERVAL_S: Final = 60.0
FIX: Final = "free memory in the store or raise its maxmemory; running jobs go on, no new job is taken meanwhile"


@dataclass
class StoreMemoryWatch:
    """Whether the store refuses writes for its memory, said once a minute; `full_since` is read from the
    registry's last beat."""

    log: EventLog
    full_since: Callable[[], float | None]
    interval_s: float = LOG_INTERVAL_S
    refused: int = 0  # writes refused for memory since the last line
    _said_at: float | None = None
    _was_full: float | None = None

    @property
    def full(self) -> bool:
        return self.full_since() is not None

    def refusal(self, error: BaseException) -> bool:
        """Count an error that is the store refusing for memory (True), to be said in the next line, not alone."""
        if out_of_memory(error):
            self.refused += 1
            return True
        return False

    async def check(self, client: aioredis.Redis) -> None:
        """Each beat: say the store is full (at most once an interval), or that it takes writes again."""
        since, now = self.full_since(), time.monotonic()
        if since is None:
            if self._was_full is not None:
                self.log("store_memory_restored", {"seconds": round(now - self._was_full), "refused": self.refused})
            self._was_full, self._said_at, self.refused = None, None, 0
            return
        self._was_full = since
        if self._said_at is not None and now - self._said_at < self.interval_s:
            return
        used, most = await _memory(client)
        self.log(
            "store_out_of_memory",
            {"usedMemory": used, "maxMemory": most, "policy": "noeviction", "refused": self.refused, "fix": FIX},
        )
        self._said_at, self.refused = now, 0


async def _memory(client: aioredis.Redis) -> tuple[int | None, int | None]:
    """The store's used and max memory in bytes (INFO memory, a read it answers while full); None where unread."""
    try:
        info: dict[str, Any] = await bounded(client.info("memory"), 2)
    except STORE_FAULTS:
        return None, None
    used, most = info.get("used_memory"), info.get("maxmemory")
    return (used if isinstance(used, int) else None), (most if isinstance(most, int) else None)
