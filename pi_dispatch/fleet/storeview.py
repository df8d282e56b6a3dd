"""The store itself, as the operator's reads show it: its role, its replicas and how far behind they are, whether it
refuses writes no replica has, its eviction policy, and, behind Sentinels, when it last failed over.

One pipeline to the primary (`INFO replication`, `INFO memory`, `CONFIG GET min-replicas-to-write`) and, for a
replicated store, one `SENTINEL MASTER` to the first Sentinel that answers. A store that refuses `CONFIG` (a managed
one may) says so instead of a figure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from pi_dispatch.core.errors import ConfigError, Problem
from pi_dispatch.core.jscompat import iso_string
from pi_dispatch.core.keys import FLEET_EPOCH
from pi_dispatch.fleet.storereset import FleetEpoch
from pi_dispatch.infra.valkey import OP_TIMEOUT_S, STORE_FAULTS, bounded, describe, reply_text

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from pi_dispatch.infra.store import StoreAddress

IN_SYNC_LAG_S: Final = 2  # a replica that acknowledged within this is in sync (the role's min-replicas-max-lag)
SAFE_POLICY: Final = "noeviction"  # any other policy may evict a queue's keys: accepted jobs lost


@dataclass(frozen=True)
class Replica:
    address: str
    state: str
    lag_s: int | None


@dataclass(frozen=True)
class Failover:
    """What the Sentinels say: their config epoch (one more per failover) and how long the primary has been one."""

    epoch: int | None
    primary_for_s: float | None
    sentinel: str


@dataclass(frozen=True)
class StoreState:
    role: str
    replicas: tuple[Replica, ...]
    eviction_policy: str
    min_replicas_to_write: int | None  # None: the store would not say
    promoted: bool  # this primary took over another's history (it was a replica once since it started)
    failover: Failover | None = None
    unreadable: str | None = None
    persistence: str | None = None  # aof, rdb or off; None: the store would not say
    epoch: FleetEpoch | None = None  # the fleet's epoch (`fleet/storereset.py`): resets seen, and the last one

    @property
    def in_sync(self) -> int:
        return sum(1 for r in self.replicas if r.state == "online" and r.lag_s is not None and r.lag_s <= IN_SYNC_LAG_S)

    @property
    def max_lag_s(self) -> int | None:
        lags = [replica.lag_s for replica in self.replicas if replica.lag_s is not None]
        return max(lags) if lags else None

    def summary(self) -> str:
        """One line, as `hosts` and `top` print it."""
        if self.unreadable is not None:
            return f"store: unreadable ({self.unreadable})"
        parts = [f"store: {self.role}", f"{self.in_sync}/{len(self.replicas)} replicas in sync"]
        if self.max_lag_s is not None:
            parts.append(f"lag {self.max_lag_s} s")
        guard = "?" if self.min_replicas_to_write is None else str(self.min_replicas_to_write)
        parts += [f"min-replicas-to-write {guard}", f"eviction {self.eviction_policy or '?'}"]
        parts.append(f"persistence {self.persistence or '?'}")
        if self.epoch is not None and self.epoch.resetAt is not None:
            parts.append(f"lost its data {self.epoch.resets}x, last at {iso_string(self.epoch.resetAt)}")
        if self.failover is not None:
            since = self.failover.primary_for_s
            held = "?" if since is None else f"{since:.0f} s"
            parts.append(f"primary for {held} (Sentinel epoch {self.failover.epoch})")
        elif self.promoted:
            parts.append("promoted from a replica")
        return " · ".join(parts)

    def as_json(self) -> dict[str, Any]:
        failover = self.failover
        return {
            "role": self.role,
            "replicas": [{"address": r.address, "state": r.state, "lagS": r.lag_s} for r in self.replicas],
            "inSync": self.in_sync,
            "maxLagS": self.max_lag_s,
            "minReplicasToWrite": self.min_replicas_to_write,
            "evictionPolicy": self.eviction_policy,
            "promoted": self.promoted,
            "sentinelEpoch": failover.epoch if failover else None,
            "primaryForS": failover.primary_for_s if failover else None,
            "unreadable": self.unreadable,
            "persistence": self.persistence,
            "resets": self.epoch.resets if self.epoch else None,
            "lastResetAt": self.epoch.resetAt if self.epoch else None,
        }


def _replicas(info: dict[str, Any]) -> tuple[Replica, ...]:
    found = []
    for key, value in info.items():
        if key.startswith("slave") and key[5:].isdigit() and isinstance(value, dict):
            lag = value.get("lag")
            address = f"{value.get('ip', '?')}:{value.get('port', '?')}"
            found.append(Replica(address, str(value.get("state", "?")), lag if isinstance(lag, int) else None))
    return tuple(found)


def _whole(value: object) -> int | None:
    text = reply_text(value)
    return int(text) if text.isascii() and text.lstrip("-").isdigit() else None


def _persistence(persisted: object, saves: object) -> str | None:
    """aof when the append-only file is on, rdb when snapshots are configured, off for neither; None: not said."""
    if isinstance(persisted, dict) and _whole(persisted.get("aof_enabled")) == 1:
        return "aof"
    if not isinstance(saves, dict):
        return None  # CONFIG not asked, or refused: the snapshot schedule cannot be read
    return "rdb" if reply_text(next(iter(saves.values()), "")).strip() else "off"


async def read_store_state(
    client: aioredis.Redis, store: StoreAddress | None = None, *, configuration: bool = False
) -> StoreState:
    """The store's state now; `unreadable` says why when it would not answer. `configuration`: also its write guard
    and snapshot schedule, which only CONFIG GET says: asked by the operator's commands alone, since a store user of
    the fleet's processes may not run it (`core/storeusers.py`: CONFIG GET reads every password the store holds)."""
    pipe = client.pipeline(transaction=False)
    pipe.info("replication")
    pipe.info("memory")
    pipe.info("persistence")
    pipe.get(FLEET_EPOCH)
    if configuration:
        pipe.config_get("min-replicas-to-write")
        pipe.config_get("save")
    try:
        replication, memory, persisted, epoch, *configured = await bounded(
            pipe.execute(raise_on_error=False), OP_TIMEOUT_S
        )
    except STORE_FAULTS as error:
        return StoreState("?", (), "", None, False, unreadable=describe(error))
    if isinstance(replication, Exception) or isinstance(memory, Exception):
        reason = describe(replication if isinstance(replication, Exception) else memory)
        return StoreState("?", (), "", None, False, unreadable=reason)
    guarded, saves = configured or (None, None)
    guard = _whole(next(iter(guarded.values()), None)) if isinstance(guarded, dict) else None
    state = StoreState(
        role=str(replication.get("role", "?")),
        replicas=_replicas(replication),
        eviction_policy=str(memory.get("maxmemory_policy", "")),
        min_replicas_to_write=guard,
        promoted=_whole(replication.get("second_repl_offset")) not in (None, -1),
        persistence=_persistence(persisted, saves),
        epoch=None if isinstance(epoch, Exception) else FleetEpoch.read(epoch),
    )
    if store is None or not store.replicated:
        return state
    return StoreState(**{**state.__dict__, "failover": await _failover(store)})


async def _failover(store: StoreAddress) -> Failover | None:
    """The first answering Sentinel's view of the primary, or None when none answers."""
    from redis.asyncio import Redis

    for host, port in store.sentinels:
        sentinel = Redis(
            host=host, port=port, password=store.sentinel_password, socket_timeout=OP_TIMEOUT_S, decode_responses=True
        )
        try:
            asked = sentinel.execute_command("SENTINEL", "MASTER", store.primary_name)  # type: ignore[no-untyped-call]
            reply = await bounded(asked, OP_TIMEOUT_S)
        except STORE_FAULTS:
            continue
        finally:
            await sentinel.aclose()
        facts = dict(zip(reply[::2], reply[1::2], strict=False)) if isinstance(reply, list) else {}
        held_ms = _whole(facts.get("role-reported-time"))
        return Failover(
            _whole(facts.get("config-epoch")), None if held_ms is None else held_ms / 1000, f"{host}:{port}"
        )
    return None


async def refuse_an_evicting_store(client: aioredis.Redis) -> None:
    """ConfigError, naming the policy and the fix, when the store may evict keys (any `maxmemory-policy` but
    noeviction): under memory pressure it would drop queued jobs the receiver answered 202 for, and leave job ids
    whose data is gone. A store that does not answer is not judged here (the caller's reach decides)."""
    try:
        memory = await bounded(client.info("memory"), OP_TIMEOUT_S)
    except STORE_FAULTS:  # unreachable or refusing INFO: not this check's to say
        return
    policy = str(memory.get("maxmemory_policy", "")) if isinstance(memory, dict) else ""
    if policy and policy != SAFE_POLICY:
        fix = f"set maxmemory-policy {SAFE_POLICY} on the store (CONFIG SET and its config file; the role does)"
        said = f"is {policy}: the store may evict queued jobs"
        raise ConfigError([Problem("maxmemory-policy", said, "the store", fix)])
