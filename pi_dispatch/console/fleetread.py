"""The fleet as `hosts` and the web console show it: the registry, each named host's queue with since when its host
is silent, the oldest jobs waiting on every queue, and the store's own state."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError

from pi_dispatch.core.keys import SHARED_QUEUE
from pi_dispatch.fleet.backlog import BACKLOG_READ
from pi_dispatch.fleet.hosts import HostQueue
from pi_dispatch.fleet.queueview import read_queues
from pi_dispatch.fleet.registry import LiveHosts, Unreachable
from pi_dispatch.fleet.rehome import known_host_queues
from pi_dispatch.fleet.snapshot import registry_now
from pi_dispatch.fleet.steal import Waiting
from pi_dispatch.fleet.storeview import StoreState, read_store_state
from pi_dispatch.infra.clock import wall_ms
from pi_dispatch.infra.store import StoreAddress


@dataclass(frozen=True)
class FleetRead:
    """The registry; each named host's queue with since when its host is silent; the oldest jobs waiting on
    every queue (`fleet/backlog.py`). The last two are empty when the store could not give them."""

    live: LiveHosts | Unreachable
    host_queues: list[HostQueue]
    waiting: list[Waiting]
    store: StoreState | None = None


async def read_fleet_state(client: Any, store: StoreAddress, *, configuration: bool = False) -> FleetRead:
    """The fleet as `hosts` shows it, in a bounded few round trips (`configuration`: `read_store_state`'s)."""
    live = await registry_now(client)
    if not isinstance(live, LiveHosts):
        return FleetRead(live, [], [])
    state = await read_store_state(client, store, configuration=configuration)
    try:
        names = await known_host_queues(client, live.hosts)
        read = await read_queues(client, [SHARED_QUEUE, *names], live.hosts, wall_ms(), backlog=BACKLOG_READ)
        return FleetRead(live, read.queues[1:], read.waiting, state)
    except (RedisError, OSError, TimeoutError):
        return FleetRead(live, [], [], state)
