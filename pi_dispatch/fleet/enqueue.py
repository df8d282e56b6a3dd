"""Routed enqueue: which queue a forge delivery belongs on, and the BullMQ add with the reference's options.

The router reads the registry at most once per 5 s (one read in flight, bounded at 1.5 s; a failed or
unreachable read is cached as "no hosts" for the window, which routes nothing). A job that needs
nothing host-specific never touches the registry. The decision is `RouteTable.route`, equal to the
reference's `routeForgeJob` for the same hosts and job id.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

from pi_dispatch.core.capabilities import job_needs, with_drains
from pi_dispatch.core.jobs import (
    DEDUP_TTL_MS,
    FORGE_JOB_OPTIONS,
    LOCAL_JOB_OPTIONS,
    LOCAL_KIND,
    JobIdError,
    forge_delivery_job_id,
    forge_job_data,
    semantic_dedup_id,
)
from pi_dispatch.core.keys import SHARED_QUEUE, host_queue_name
from pi_dispatch.core.routing import RouteTable
from pi_dispatch.fleet.snapshot import FleetView, fleet_view, read_drained
from pi_dispatch.infra.events import EventLog, discard
from pi_dispatch.infra.store import StoreAddress
from pi_dispatch.infra.storeprobes import NotPrimary, ReplicaCount
from pi_dispatch.infra.valkey import STORE_FAULTS, bounded, describe, outages_named

HOSTS_TTL_S: Final = 5.0
MAX_VIEW_AGE_S: Final = 60.0  # a routing view older than this is not routed by
DRAINS_TTL_S: Final = 1.0  # an operator's drain or resume reaches a router's decisions within this
READ_TIMEOUT_S: Final = 1.5
ADD_TIMEOUT_S: Final = 5.0
# A replicated store acknowledges an add only once every replica up holds it (`infra/store.ReplicaCount` says why
# every one): WAIT for them, this long at most (within ADD_TIMEOUT_S). A job the primary took but the replicas did not
# confirm is reported as not acknowledged; the forge's redelivery, or the operator's retry, finds it by its
# deterministic id if the primary kept it.
REPLICA_WAIT_MS: Final = 1_000


class NotReplicated(ConnectionError):
    """The primary took the write, but no replica confirmed it in time: not acknowledged, since a failover now would
    lose it."""


HostsReader = Callable[[], Awaitable[list[dict[str, object]]]]
DrainsReader = Callable[[], Awaitable[frozenset[str] | None]]


def registry_reader(client: Any) -> HostsReader:
    """Read live hosts from a Valkey client: the fleet's snapshot of the registry (one GET) while it is fresh
    (`fleet/snapshot.py`), else the registry itself; an unreachable store raises."""

    async def read() -> list[dict[str, object]]:
        result = await fleet_view(client, timeout_s=READ_TIMEOUT_S)
        if not isinstance(result, FleetView):
            raise ConnectionError(result.reason)
        return result.live.hosts

    return read


def store_router(client: Any, log: EventLog = discard) -> ForgeRouter:
    """A router over a store: its registry view as `registry_reader` reads it, and the drains read beside it."""
    return ForgeRouter(registry_reader(client), log=log, read_drains=lambda: read_drained(client, READ_TIMEOUT_S))


def _delivery_job_id(kind: str, job: Mapping[str, Any]) -> str:
    trigger = job.get("trigger")
    delivery = trigger.get("deliveryId") if isinstance(trigger, Mapping) else None
    return forge_delivery_job_id(kind, delivery, job.get("replica"))


@dataclass
class ForgeRouter:
    """Chooses a forge job's queue from a cached view of the registry, refreshed in the background.

    A view younger than `ttl_s` is used as is; an older one is still used, up to `max_age_s`, while a refresh runs
    beside the decision, so a decision never waits on a registry read because the fleet is large or the store
    slow; a read that fails keeps the last view. Only with no view younger than `max_age_s` does a decision wait
    for a read (and abstain to the shared queue when that fails too).
    """

    read_hosts: HostsReader
    clock: Callable[[], float] = time.monotonic
    ttl_s: float = HOSTS_TTL_S
    read_timeout_s: float = READ_TIMEOUT_S
    log: EventLog = discard
    max_age_s: float = MAX_VIEW_AGE_S
    read_drains: DrainsReader | None = None
    drains_ttl_s: float = DRAINS_TTL_S
    reads: int = 0
    _table: RouteTable | None = None
    _hosts: list[dict[str, object]] = field(default_factory=list)
    _drained: frozenset[str] | None = None
    _drains_at: float = float("-inf")
    _read_at: float = float("-inf")
    _tried_at: float = float("-inf")
    _inflight: asyncio.Future[RouteTable] | None = field(default=None, repr=False)

    @property
    def view_age_s(self) -> float:
        """How old the view the next decision uses is (infinite before the first read)."""
        return self.clock() - self._read_at

    async def _snapshot(self) -> RouteTable:
        age = self.view_age_s
        if self._table is not None and age < self.ttl_s:
            return self._table
        if self._inflight is None and self.clock() - self._tried_at >= self.ttl_s:
            self._tried_at = self.clock()
            self._inflight = asyncio.ensure_future(self._read())
            self._inflight.add_done_callback(self._read_done)
        if self._table is not None and (age < self.max_age_s or self._inflight is None):
            if age >= self.max_age_s:
                return RouteTable([])  # too old to route by, and the last read failed: abstain
            return self._table
        if self._inflight is None:
            return self._table if self._table is not None else RouteTable([])
        return await asyncio.shield(self._inflight)

    def _read_done(self, _: asyncio.Future[RouteTable]) -> None:
        self._inflight = None

    async def _read(self) -> RouteTable:
        self.reads += 1
        try:
            hosts = await bounded(self.read_hosts(), self.read_timeout_s)
        except STORE_FAULTS as error:  # the last view stays; none at all routes nothing until the next try
            self.log("routing_view_unread", {"reason": describe(error), "ageS": round(self.view_age_s, 1)})
            usable = self._table is not None and self.view_age_s < self.max_age_s
            return self._table if usable and self._table is not None else RouteTable([])
        self._table, self._hosts, self._read_at = RouteTable.from_hosts(hosts), hosts, self.clock()
        self._drains_at = float("-inf")  # the drains are read again beside the next decision
        return self._table

    async def _drains_now(self, table: RouteTable) -> RouteTable:
        """The table with the operator's drains and resumes as they are now: the small drain set is read at most
        once a `drains_ttl_s`, the registry's view only every `ttl_s`, so a drain reaches routing within a second."""
        if self.read_drains is None or table is not self._table or self.clock() - self._drains_at < self.drains_ttl_s:
            return table  # no reader, an abstention (no view to route by), or read a moment ago
        self._drains_at = self.clock()
        try:
            drained = await bounded(self.read_drains(), self.read_timeout_s)
        except STORE_FAULTS as error:  # the view as read stays; the next decision past the TTL tries again
            self.log("routing_drains_unread", {"reason": describe(error)})
            return table
        if drained is not None and drained != self._drained:  # None: no drain set to go by, the rows' word stands
            self._drained = drained
            self._table = RouteTable.from_hosts(with_drains(self._hosts, drained))
        return self._table

    async def queue_for(self, kind: str, job: Mapping[str, Any]) -> str:
        """`pi-jobs@<host>` for a job routed to a host, else the shared queue."""
        needs = job_needs(job)
        if not needs:
            return SHARED_QUEUE
        try:
            job_id = _delivery_job_id(kind, job)
        except JobIdError:
            return SHARED_QUEUE
        host = (await self._drains_now(await self._snapshot())).route(needs, job_id)
        if host is None:
            return SHARED_QUEUE
        self.log("forge_job_routed", {"kind": kind, "host": host, "needs": ",".join(needs)})
        return host_queue_name(host)


def forge_job_options(kind: str, job: Mapping[str, Any]) -> dict[str, Any]:
    """The reference's options for a forge job: attempts, backoff, retention, job id and dedup."""
    return {
        **FORGE_JOB_OPTIONS,
        "jobId": _delivery_job_id(kind, job),
        "deduplication": {"id": semantic_dedup_id(kind, job), "ttl": DEDUP_TTL_MS},
    }


class Enqueued(NamedTuple):
    """Where a job went. `kept` is the job BullMQ kept: another one's id when the dedup window dropped it."""

    queue: str
    job_id: str
    kept: str

    @property
    def deduplicated(self) -> bool:
        return self.kept != self.job_id


@dataclass
class Enqueuer:
    """Adds forge jobs through BullMQ, one pooled Queue per queue name, opened on first use.

    An add to a queue nothing is being sent to goes at once, in its own task, as one plain `Queue.add`: an add
    alone costs what BullMQ's own costs. Adds that arrive while a send to their queue is in flight gather, and go
    together as soon as it ends, in one BullMQ `addBulk` (one round trip, one MULTI/EXEC), so overlapping
    deliveries cost fewer round trips than jobs. Each add still answers for its own job: the id BullMQ kept, or
    the error that sank its batch. On a replicated store a batch is added one by one on the queue's own connection
    and confirmed by one WAIT: WAIT counts only what its connection wrote, and BullMQ's addBulk writes on another.
    """

    store: StoreAddress
    router: ForgeRouter
    add_timeout_s: float = ADD_TIMEOUT_S
    replica_wait_ms: int = REPLICA_WAIT_MS
    _replicas: ReplicaCount | None = field(default=None, repr=False)
    queues: dict[str, Any] = field(default_factory=dict)
    _sending: set[str] = field(default_factory=set, repr=False)
    _gathering: dict[str, list[_Add]] = field(default_factory=dict, repr=False)
    _flushing: set[asyncio.Task[None]] = field(default_factory=set, repr=False)

    def _queue(self, name: str) -> Any:
        if name not in self.queues:
            from bullmq import Queue

            # one connection per queue: the WAIT after an add then counts that add
            self.queues[name] = Queue(name, {"connection": self.store.queue_connection(single=True)})
        return self.queues[name]

    async def _replicated(self, queue: Any) -> None:
        """On a replicated store, return once a replica holds what this queue's connection wrote, else raise."""
        if not self.store.replicated:
            return
        if self._replicas is None:
            self._replicas = ReplicaCount(self.store)
        from pi_dispatch.infra.bullmq import add_connection

        connection = add_connection(queue)  # the one connection the add went on (`queue_connection(single=True)`)
        try:
            required = await self._replicas.required((str(connection.host), int(connection.port)))
        except NotPrimary:
            await connection.disconnect()  # the next add asks the Sentinels where the primary is
            raise
        confirmed = await queue.client.execute_command("WAIT", required, self.replica_wait_ms)
        if int(confirmed) < required:
            raise NotReplicated(
                f"{confirmed} of {required} replicas confirmed the job within {self.replica_wait_ms} ms"
            )

    async def enqueue_forge_job(self, kind: str, job: Mapping[str, Any]) -> Enqueued:
        """Route and add the job. Raises JobIdError for an unusable delivery, and the error of the add itself (a
        TimeoutError, NotReplicated, redis-py's) when the store did not take it: `is_outage` tells an outage."""
        options = forge_job_options(kind, job)
        name = await self.router.queue_for(kind, job)
        data = forge_job_data(kind, job)
        if name in self._sending:
            add = _Add(kind, data, options, asyncio.get_running_loop().create_future())
            self._gathering.setdefault(name, []).append(add)
            kept = await add.answer
        else:
            kept = await self._add_alone(name, kind, data, options)
        return Enqueued(name, str(options["jobId"]), kept)

    async def _add_alone(self, name: str, kind: str, data: dict[str, Any], options: dict[str, Any]) -> str:
        self._sending.add(name)
        try:
            # asyncio.timeout rather than bounded(): no task per add, and a cancelled add unwinds at once, since
            # BullMQ's client drops the connection it was reading from.
            async with asyncio.timeout(self.add_timeout_s):
                queue = self._queue(name)
                job = await queue.add(kind, data, options)
                await self._replicated(queue)
        finally:
            self._sent(name)
        return _kept(job, options)

    def _sent(self, name: str) -> None:
        """A send to the queue ended: what gathered meanwhile goes next, together; else the queue is free."""
        gathered = self._gathering.pop(name, [])
        if not gathered:
            self._sending.discard(name)
            return
        task = asyncio.ensure_future(self._add_bulk(name, gathered))
        self._flushing.add(task)
        task.add_done_callback(self._flushing.discard)

    async def _add_bulk(self, name: str, adds: list[_Add]) -> None:
        try:
            async with asyncio.timeout(self.add_timeout_s):
                queue = self._queue(name)
                if self.store.replicated:  # BullMQ's addBulk sends its MULTI on another connection than the WAIT's
                    added = [await queue.add(add.kind, add.data, add.options) for add in adds]
                else:
                    added = await queue.addBulk([{"name": a.kind, "data": a.data, "opts": a.options} for a in adds])
                await self._replicated(queue)
        except BaseException as error:  # every add of the batch answers with the error, then it goes on up
            for add in adds:
                if not add.answer.done():
                    add.answer.set_exception(error if isinstance(error, Exception) else ConnectionError("cancelled"))
            if not isinstance(error, Exception):
                raise
            return
        finally:
            self._sent(name)
        for add, job in zip(adds, added, strict=True):
            if not add.answer.done():
                add.answer.set_result(_kept(job, add.options))

    async def enqueue_local_job(self, queue: str, job: Mapping[str, Any], job_id: str) -> str:
        """Add a local job to a queue (its host's), with the reference's options; the id the queue kept."""
        options = {**LOCAL_JOB_OPTIONS, "jobId": job_id}
        async with asyncio.timeout(self.add_timeout_s):
            added = await self._queue(queue).add(LOCAL_KIND, dict(job), options)
        return _kept(added, options)

    async def close(self) -> None:
        """Close every queue it opened (raises StoreUnavailable when the store is away meanwhile)."""
        if self._flushing:
            await asyncio.gather(*self._flushing, return_exceptions=True)
        with outages_named():
            for queue in self.queues.values():
                await queue.close()
        self.queues.clear()
        if self._replicas is not None:
            await self._replicas.close()


def _kept(job: Any, options: Mapping[str, Any]) -> str:
    """The id of the job BullMQ kept for an add: its own, or the one the dedup window kept instead."""
    return str(job.id) if job.id is not None else str(options["jobId"])


@dataclass
class _Add:
    kind: str
    data: dict[str, Any]
    options: dict[str, Any]
    answer: asyncio.Future[str]
