"""The worker's cron: BullMQ job schedulers on this host's queue, kept equal to the cron entries of PI_TRIGGERS_FILE.

Reconciled at boot and whenever the file changes (`triggers/watch.py`): each entry is upserted (BullMQ keys a
scheduler by its id, so an unchanged entry stays as it is), then every resident scheduler the file no longer
names is removed with its pending job. Patterns resolve in this host's zone, which each scheduler stores, so
whichever worker takes a job computes the next one alike. Never while the live hosts disagree about the zone
(a pattern names none, so two zones make one pattern two instants): the refusal is logged and tried again each
beat. A worker without a name schedules on the shared queue, whose schedulers every nameless worker shares, so
it also refuses while such a peer publishes another `fpCron`: each would remove the other's. A named worker
without a file removes what its own queue still holds; a nameless one leaves the shared queue alone. A file
that stops loading keeps the schedulers, and the fingerprint, it had.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pi_dispatch.core.capabilities import is_live
from pi_dispatch.core.errors import ConfigError
from pi_dispatch.fleet.registry import LiveHosts
from pi_dispatch.fleet.snapshot import FleetView, compact_registry, fleet_view
from pi_dispatch.infra.events import EventLog, discard
from pi_dispatch.infra.store import StoreAddress
from pi_dispatch.infra.valkey import STORE_FAULTS, bounded, describe
from pi_dispatch.triggers.schedules import (
    LOCAL_JOB_NAME,
    LOCAL_JOB_OPTIONS,
    Schedule,
    authored_cron,
    check_patterns,
    cron_fingerprint,
    schedules_of,
    zones_disagree,
)

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from pi_dispatch.triggers.file import Trigger

OP_TIMEOUT_S = 5.0


@dataclass
class CronSchedules:
    """This host's schedulers. `authored` None means cron is disabled (no triggers file)."""

    client: aioredis.Redis
    store: StoreAddress
    queue_name: str
    zone: str
    me: str
    shared: bool  # scheduling on the shared queue: a nameless worker
    publish: Callable[[], Awaitable[bool]]
    triggers: list[Trigger] | None = None
    log: EventLog = discard
    pending: bool = True
    retrying: bool = False  # a reconcile was refused or failed since the last change: retries read the snapshot
    _queue: Any = field(default=None, repr=False)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)
    _tasks: set[asyncio.Task[bool]] = field(default_factory=set, repr=False)

    def __post_init__(self) -> None:
        self._take(self.triggers)

    def _take(self, triggers: list[Trigger] | None) -> None:
        self.triggers = triggers
        self.schedules: list[Schedule] = schedules_of(triggers) if triggers is not None else []
        self.fingerprint = cron_fingerprint(authored_cron(triggers) if triggers is not None else None, self.zone)

    def row_facts(self) -> Mapping[str, str]:
        """The row's `fpCron` and `cronCount`, read for every beat."""
        return {"fpCron": self.fingerprint, "cronCount": str(len(self.schedules))}

    def changed(self, triggers: list[Trigger]) -> None:
        """A new valid version of the file (called on the loop by the watch): reconcile when its cron changed."""
        try:
            check_patterns(triggers, "triggers file")
        except ConfigError as error:
            self.log("schedules_reload_invalid", {"reason": error.problems[0].subject, "kept": True})
            return
        before = self.fingerprint
        self._take(triggers)
        if self.fingerprint != before or self.pending:
            self.pending, self.retrying = True, False
            task = asyncio.ensure_future(self.reconcile())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def retry(self) -> None:
        """Each beat: a reconcile refused or failed before is tried again."""
        if self.pending:
            await self.reconcile()

    async def reconcile(self) -> bool:
        """Make the queue's schedulers the file's. False (and still pending) when refused or failed."""
        async with self._lock:
            if self.triggers is None and self.shared:
                self.pending = False
                return True  # no opinion, and the shared queue's schedulers are the other nameless workers'
            try:
                refusal = await self._refusal()
                self.retrying = True  # until it succeeds
                if refusal is not None:
                    self.log("cron_reconcile_refused", refusal)
                    return False
                installed, removed = await self._apply()
            except STORE_FAULTS as error:  # the store away, or refusing a scheduler: the next beat tries again
                self.retrying = True
                self.log("cron_reconcile_failed", {"reason": describe(error)})
                return False
            self.pending = self.retrying = False
            self.log(
                "schedules_reconciled",
                {"queue": self.queue_name, "installed": installed, "removed": removed, "fpCron": self.fingerprint},
            )
            return True

    async def _refusal(self) -> dict[str, object] | None:
        """Why not to reconcile now, from the live peers; None to go ahead. Publishing first means a peer that
        reconciles after this read sees this host's current zone and fingerprint. A retry reads the fleet's snapshot
        (a beat old at most): a refusal that lasts (a zone mistyped on one host) must not make every refused host
        read every row every beat."""
        await self.publish()
        if self.retrying:
            view = await fleet_view(self.client)
            live = view.live if isinstance(view, FleetView) else view
        else:
            live = await compact_registry(self.client)
        if not isinstance(live, LiveHosts):
            return None  # not knowing whether anyone disagrees is not knowing that someone does
        peers = [host for host in live.hosts if is_live(host) and host.get("name") != self.me]
        if zones := zones_disagree(self.zone, (host.get("tz") for host in peers)):
            return {"reason": "tz-disagreement", "zones": zones}
        if self.shared:
            differing = sorted(
                str(host.get("name"))
                for host in peers
                if host.get("routes") != "true" and host.get("fpCron") not in ("", None, self.fingerprint)
            )
            if differing:
                return {"reason": "cron-divergence", "peers": differing, "fpCron": self.fingerprint}
        return None

    async def _apply(self) -> tuple[int, int]:
        """Reconcile through a Queue opened for it and closed after: reconciles are rare (boot, a changed file), and
        an open Queue holds a connection and BullMQ's every script for the worker's whole life."""
        try:
            return await self._apply_on(self._open())
        finally:
            await self._close_queue()

    async def _apply_on(self, queue: Any) -> tuple[int, int]:
        repeat: dict[str, str] = {"tz": self.zone} if self.zone else {}
        for schedule in self.schedules:
            await bounded(
                queue.upsertJobScheduler(
                    schedule.scheduler_id,
                    {"pattern": schedule.pattern, **repeat},
                    LOCAL_JOB_NAME,
                    dict(schedule.data),
                    dict(LOCAL_JOB_OPTIONS),
                ),
                OP_TIMEOUT_S,
            )
        wanted = {schedule.scheduler_id for schedule in self.schedules}
        resident = await bounded(queue.getJobSchedulers(0, -1), OP_TIMEOUT_S)
        stale = sorted({str(found.get("key")) for found in resident if isinstance(found, Mapping)} - wanted)
        for scheduler_id in stale:
            await bounded(queue.removeJobScheduler(scheduler_id), OP_TIMEOUT_S)
            self.log("scheduler_removed", {"schedulerId": scheduler_id, "queue": self.queue_name})
        return len(self.schedules), len(stale)

    def _open(self) -> Any:
        if self._queue is None:
            from bullmq import Queue

            self._queue = Queue(self.queue_name, {"connection": self.store.queue_connection()})
        return self._queue

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await self._close_queue()

    async def _close_queue(self) -> None:
        queue, self._queue = self._queue, None
        if queue is not None:
            with contextlib.suppress(*STORE_FAULTS):
                await bounded(queue.close(), OP_TIMEOUT_S)
