"""The fleet lease the reference holds its fleet-wide slots with: `wait:check:<i>` (how many wait checks run at once)
and `slot:s:<hash16>:<i>` (how many of a scope's jobs run at once), shared with Node hosts key for key.

A slot is a string key holding `<worker name>#<job id>` (a worker name never holds `#`), set with `NX` and a TTL in
milliseconds. A job probes the slots from `|javaHash(job id)| mod slots` on, so jobs spread over the slots rather
than all racing for slot 0; the first free one is its own. Here the probe is one script, so it costs one round trip
whatever the slot count, and a release deletes a slot only while it still holds exactly this holder. A worker's
boot sweeps the slots its name left behind (values starting `<name>#`), read from its file's rows, never by a scan.
Each call is one bounded round trip; what a fault means (grant or wait) is the caller's to say.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, cast

from pi_dispatch.infra.valkey import bounded

if TYPE_CHECKING:
    import redis.asyncio as aioredis

LEASE_OP_TIMEOUT_S: Final = 2.0  # the reference's: a lease call that takes longer counts as a fault
HOLDER_SEPARATOR: Final = "#"

# KEYS: the slots in probing order. ARGV: the holder, the TTL in ms. The first slot taken, or false when all are held.
ACQUIRE: Final = """
for _, key in ipairs(KEYS) do
  if redis.call('SET', key, ARGV[1], 'PX', ARGV[2], 'NX') then return key end
end
return false
"""
# KEYS: slots. ARGV: the holder. Deletes each slot still holding exactly the holder; how many it deleted.
RELEASE: Final = """
local deleted = 0
for _, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[1] then redis.call('DEL', key); deleted = deleted + 1 end
end
return deleted
"""
# KEYS: slots. ARGV: a holder prefix (`<name>#`). Deletes each string slot whose holder starts with it.
SWEEP: Final = """
local deleted = 0
for _, key in ipairs(KEYS) do
  if redis.call('TYPE', key).ok == 'string' then
    local holder = redis.call('GET', key)
    if string.sub(holder, 1, string.len(ARGV[1])) == ARGV[1] then redis.call('DEL', key); deleted = deleted + 1 end
  end
end
return deleted
"""


def java_hash(text: str) -> int:
    """Java's String.hashCode over the UTF-16 code units, as a signed 32-bit integer (what the reference probes by)."""
    units = text.encode("utf-16-le")
    value = 0
    for index in range(0, len(units), 2):
        value = (value * 31 + int.from_bytes(units[index : index + 2], "little")) & 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def probe_order(prefix: str, slots: int, job_id: str) -> list[str]:
    """The slot keys in the order a job tries them."""
    start = abs(java_hash(job_id)) % slots
    return [f"{prefix}{(start + step) % slots}" for step in range(slots)]


def holder_of(worker_name: str, job_id: str) -> str:
    return f"{worker_name}{HOLDER_SEPARATOR}{job_id}"


@dataclass(frozen=True)
class Lease:
    """A slot held: its key (None for a grant that took none: no bound, or a fault), and every key it may hold."""

    holder: str
    key: str | None
    tried: tuple[str, ...] = ()


@dataclass
class FleetLease:
    """Slots of one kind (`prefix` + index) for one worker."""

    client: aioredis.Redis
    worker_name: str

    async def acquire(self, prefix: str, slots: int, job_id: str, ttl_ms: int) -> Lease | None:
        """A free slot of `slots` for the job, or None when every one is held. Raises the store's error (or
        StoreUnavailable past LEASE_OP_TIMEOUT_S): a command sent may still have landed, so a caller that goes on
        without the slot releases `Lease.tried` (`release_tried`)."""
        keys = probe_order(prefix, slots, job_id)
        holder = holder_of(self.worker_name, job_id)
        taken = await bounded(self.client.eval(ACQUIRE, len(keys), *keys, holder, str(ttl_ms)), LEASE_OP_TIMEOUT_S)
        if taken is None:
            return None
        key = taken.decode() if isinstance(taken, bytes) else str(taken)
        return Lease(holder, key, (key,))

    def unsure(self, prefix: str, slots: int, job_id: str) -> Lease:
        """The grant of an acquire that met a fault: no slot known, every slot it may have taken to release."""
        return Lease(holder_of(self.worker_name, job_id), None, tuple(probe_order(prefix, slots, job_id)))

    async def release(self, lease: Lease) -> int:
        """Delete the lease's slots that still hold it (a second release, or one after its TTL, deletes nothing)."""
        if not lease.tried:
            return 0
        deleted = await bounded(
            self.client.eval(RELEASE, len(lease.tried), *lease.tried, lease.holder), LEASE_OP_TIMEOUT_S
        )
        return int(cast(Any, deleted))

    async def sweep(self, keys: Sequence[str]) -> int:
        """Delete this worker's slots among `keys` (left by a run of it that died): at boot, once its containers
        are known gone."""
        if not keys:
            return 0
        prefix = f"{self.worker_name}{HOLDER_SEPARATOR}"
        deleted = await bounded(self.client.eval(SWEEP, len(keys), *keys, prefix), LEASE_OP_TIMEOUT_S)
        return int(cast(Any, deleted))
