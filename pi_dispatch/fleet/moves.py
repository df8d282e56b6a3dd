"""One job moved from one queue to another, atomically (`lua/rehome.lua`): re-homing, a drain and a steal.

The job is on exactly one queue before and after, whoever dies when; it keeps its id, data, attempts and logs.
A steal (`steal=True`) takes only a waiting job, once per wait, and marks it with the queue it came from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from pi_dispatch.core.keys import bull_key
from pi_dispatch.infra.valkey import OP_TIMEOUT_S, bounded, packaged_script

if TYPE_CHECKING:
    import redis.asyncio as aioredis

# What the script answers when the job did not move.
ID_TAKEN: Final = -1
NOT_WAITING: Final = -3
STOLEN_ALREADY: Final = -4
# The job-hash fields a steal leaves: the job's `ats` when it moved, and the queue the router put it on.
STOLEN_FIELD: Final = "pdStolen"
ROUTED_FIELD: Final = "pdRouted"


def move_keys(source: str, target: str, job_id: str, dedup_id: str) -> list[str]:
    """The script's keys, in the order its header lists them."""
    return [
        bull_key(source, "wait"),
        bull_key(source, "delayed"),
        bull_key(source, "prioritized"),
        bull_key(source, job_id),
        bull_key(target, job_id),
        bull_key(target, "wait"),
        bull_key(target, "delayed"),
        bull_key(target, "prioritized"),
        bull_key(target, "marker"),
        bull_key(target, "meta"),
        bull_key(target, "pc"),
        bull_key(target, "events"),
        bull_key(source, f"{job_id}:logs"),
        bull_key(target, f"{job_id}:logs"),
        bull_key(source, f"de:{dedup_id}"),
        bull_key(target, f"de:{dedup_id}"),
    ]


@dataclass
class JobMover:
    """The move script, registered once per client."""

    client: aioredis.Redis
    timeout_s: float = OP_TIMEOUT_S
    _script: Any = field(default=None, repr=False)

    async def move(self, source: str, target: str, job_id: str, dedup_id: str, *, steal: bool = False) -> str | int:
        """The state the job now has on `target` ("wait", "delayed", "prioritized"), or why it did not move."""
        if self._script is None:
            self._script = self.client.register_script(packaged_script("rehome"))
        keys = move_keys(source, target, job_id, dedup_id)
        args = [job_id, dedup_id, "steal" if steal else "", source if steal else ""]
        result = await bounded(self._script(keys=keys, args=args), self.timeout_s)
        if isinstance(result, bytes):
            return result.decode()
        return result if isinstance(result, str) else int(result)
