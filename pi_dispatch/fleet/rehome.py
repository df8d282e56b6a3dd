"""Re-homing: the jobs of a named host that stays silent move to the live fleet, so none waits for a dead machine.

A host is silent from its last beat (or, with no row left, from when a peer first noticed); after
PI_REHOME_AFTER_MS of silence, a live worker holding the fleet lease `rehome:lease` runs BullMQ's own
stalled-job recovery on `pi-jobs@<host>` (active jobs whose lock expired go back to waiting), then moves every
waiting, delayed and prioritized job to the queue the router picks now: another capable live host's, or the
shared queue where routing abstains. A local job (cron: a scheduler's next run) stays: it works in a folder on
that host, and its scheduler lives on that queue, so it waits for its host. Each move is one Lua script
(`fleet/moves.py`), so a job is on exactly one queue whoever dies when; it keeps its id, data, attempts and
what is left of its delay. A host back within the threshold keeps its queue; one back later finds it empty
(but for its cron) and works as usual.

One sweeper sweeps per interval fleet-wide: the worker that wins `rehome:lease` keeps it for the interval (one
that dies mid-sweep is taken over when it expires). A sweep costs what the silent hosts cost, not the fleet: it
looks only at the hosts whose rows say they are silent and those in `rehome:silent` (a host whose row went away:
it stopped, or a reader pruned its expired entry), one pipeline for all of them, and drops a host from that set
once it is back or its queue holds nothing; every FULL_SCAN_MS, fleet-wide, it also SCANs for host queues nobody
registered, and a silent host whose last look found nothing movable (only jobs bound to it) is looked at again
only once what its queue holds, or its last event, changes (or every FULL_SCAN_MS). The operator's reads
(`hosts`, `top`, `audit --live`) read every queue they show with `fleet/queueview.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from pi_dispatch.core.capabilities import is_live, job_needs
from pi_dispatch.core.jobs import LOCAL_KIND
from pi_dispatch.core.jscompat import DAY_MS
from pi_dispatch.core.keys import (
    BULL_PREFIX,
    HOST_QUEUE_META_PATTERN,
    REHOME_LEASE,
    REHOME_SCAN,
    REHOME_SILENT,
    SHARED_QUEUE,
    bull_key,
    host_queue_name,
    queue_of_meta_key,
    rehome_since_key,
    worker_of_queue,
)
from pi_dispatch.core.routing import RouteTable
from pi_dispatch.fleet.epoch import epoch_of, store_epoch
from pi_dispatch.fleet.hosts import FleetHost, QueueCounts, silent_since
from pi_dispatch.fleet.moves import ID_TAKEN, JobMover
from pi_dispatch.fleet.registry import LiveHosts, beating
from pi_dispatch.fleet.snapshot import FleetView, compact_registry, fleet_view
from pi_dispatch.infra.clock import wall_ms
from pi_dispatch.infra.events import EventLog, discard
from pi_dispatch.infra.store import StoreAddress
from pi_dispatch.infra.valkey import (
    OP_TIMEOUT_S,
    STORE_FAULTS,
    bounded,
    describe,
    outages_named,
    reply_text,
    reply_whole,
)

if TYPE_CHECKING:
    import redis.asyncio as aioredis

SWEEP_S: Final = 15.0  # at most; a shorter threshold sweeps a quarter of it
LEASE_MS: Final = 30_000
FULL_SCAN_MS: Final = 600_000  # how often, fleet-wide, a sweep also SCANs for host queues nobody registered
MOVES_PER_SWEEP: Final = 1_000  # bounds one sweep; the next one goes on where it stopped
SINCE_TTL_MS: Final = 30 * DAY_MS  # a host retired for good does not leave its key behind forever
# Jobs a stalled check may put back before BullMQ fails them for good; a worker that dies with a job is not the
# job's fault, and a job failed this way still gets a record (worker.py).
MAX_STALLS: Final = 5


async def host_queue_names(client: aioredis.Redis, timeout_s: float = OP_TIMEOUT_S) -> list[str]:
    """Every `pi-jobs@<name>` queue BullMQ has seen, found by its meta key (SCAN, never KEYS)."""
    found: set[str] = set()
    cursor: int | bytes = 0
    while True:
        cursor, keys = await bounded(client.scan(int(cursor), match=HOST_QUEUE_META_PATTERN, count=500), timeout_s)
        found.update(queue for key in keys if (queue := queue_of_meta_key(reply_text(key))) is not None)
        if int(cursor) == 0:
            return sorted(found)


COUNTED: Final = (
    ("wait", "llen"),
    ("delayed", "zcard"),
    ("prioritized", "zcard"),
    ("active", "llen"),
    ("failed", "zcard"),
)


def _count(pipe: Any, queue: str) -> None:
    """Queue the counters `QueueCounts` takes, in its order."""
    for suffix, command in COUNTED:
        getattr(pipe, command)(bull_key(queue, suffix))


async def known_host_queues(
    client: aioredis.Redis, rows: list[dict[str, object]], timeout_s: float = OP_TIMEOUT_S
) -> list[str]:
    """The host queues an operator is shown, in one round trip whatever the store holds: each routable row's, and
    each silent host's (`rehome:silent`, which a sweep also fills from its SCAN for queues nobody registered)."""
    silent = await bounded(client.zrange(REHOME_SILENT, 0, -1), timeout_s)
    routable = {host_queue_name(str(row["name"])) for row in rows if FleetHost.of_row(row).routes == "true"}
    return sorted(routable | {host_queue_name(reply_text(name)) for name in silent})


async def queue_counts(client: aioredis.Redis, queue: str, timeout_s: float = OP_TIMEOUT_S) -> QueueCounts:
    pipe = client.pipeline(transaction=False)
    _count(pipe, queue)
    waiting, delayed, prioritized, active, failed = await bounded(pipe.execute(), timeout_s)
    return QueueCounts(int(waiting), int(delayed), int(prioritized), int(active), int(failed))


@dataclass(frozen=True)
class QueueHeld:
    """What a silent host's queue holds, as a sweep compares it with the last sweep's."""

    waiting: int
    delayed: int
    prioritized: int
    active: int
    last_event: str


SilentState = tuple[int, bool, QueueHeld]  # silent since, that stored already, what its queue holds


@dataclass
class Rehomer:
    """One worker's share of re-homing: a sweep every SWEEP_S, which does work only while it holds the lease."""

    client: aioredis.Redis
    store: StoreAddress  # for BullMQ's own stalled-job script on the dead host's queue
    after_ms: int
    lock_duration_ms: int
    log: EventLog = discard
    now: Callable[[], int] = wall_ms
    paused: Callable[[], bool] = lambda: False  # while true, no sweep (a clock too far from the store's)
    _bullmq: Any = field(default=None, repr=False)  # BullMQ's stalled-job check, over one connection
    # silent hosts whose last attempt found nothing movable: what their queue held then, and when
    _settled: dict[str, tuple[QueueHeld, int]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._mover = JobMover(self.client)

    @property
    def interval_s(self) -> float:
        return min(SWEEP_S, self.after_ms / 4000)

    async def run_forever(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.interval_s)
            if stop.is_set():
                return
            if self.paused():
                continue
            try:
                with outages_named():  # BullMQ's moves raise redis-py's errors
                    await self.sweep(hold=True)
            except STORE_FAULTS as error:  # an outage: the next sweep tries again
                self.log("rehome_sweep_failed", {"reason": describe(error)})

    async def sweep(self, *, hold: bool = False) -> int:
        """Re-home what is due; returns how many jobs moved. Does nothing without the lease. `hold` keeps the lease
        for the sweep interval, so one sweeper sweeps per interval fleet-wide (one that dies mid-sweep is taken
        over when it expires); else it is given back when the sweep is done. The lease holds for the store's epoch
        it was granted in: after a failover the sweeper stops (`fleet/epoch.py`)."""
        token = secrets.token_hex(8)
        lease_ms = int(self.interval_s * 1000) if hold else LEASE_MS
        pipe = self.client.pipeline(transaction=False)  # one connection: the epoch of the store that granted it
        pipe.set(REHOME_LEASE, token, nx=True, px=lease_ms)
        pipe.info("replication")
        granted, replication = await bounded(pipe.execute(), OP_TIMEOUT_S)
        if not granted:
            return 0
        try:
            return await self._sweep(elected=hold, epoch=epoch_of(replication))
        finally:
            if not hold:
                with contextlib.suppress(*STORE_FAULTS):
                    if reply_text(await bounded(self.client.get(REHOME_LEASE), OP_TIMEOUT_S)) == token:
                        await bounded(self.client.delete(REHOME_LEASE), OP_TIMEOUT_S)

    async def _sweep(self, *, elected: bool = False, epoch: str | None = None) -> int:
        """The queues of silent hosts only: those whose rows say so, those whose rows went away (`rehome:silent`),
        and, at most every FULL_SCAN_MS fleet-wide, any other host queue a SCAN finds. The elected sweeper reads
        the rows from the fleet's snapshot (`fleet/snapshot.py`); a one-off sweep reads the registry."""
        live = await self._rows(elected)
        if live is None:
            return 0  # an unreadable registry is not evidence that anyone is dead
        now = self.now()
        table = RouteTable.from_hosts(live.hosts)
        alive = {str(row["name"]) for row in live.hosts if is_live(row)}
        pipe = self.client.pipeline(transaction=False)
        pipe.zremrangebyscore(REHOME_SILENT, "-inf", now - SINCE_TTL_MS)
        pipe.zrange(REHOME_SILENT, 0, -1)
        pipe.set(REHOME_SCAN, "1", nx=True, px=FULL_SCAN_MS)
        _, listed, scan = await bounded(pipe.execute(), OP_TIMEOUT_S)
        silent = {reply_text(name) for name in listed} | {str(row["name"]) for row in live.hosts} - alive
        if scan:
            silent |= {host for queue in await host_queue_names(self.client) if (host := worker_of_queue(queue))}
        back, silent = silent & alive, silent - alive
        states = await self._silent_states(sorted(silent), live.hosts, now)
        pipe = self.client.pipeline(transaction=False)
        for host in back | {host for host, state in states.items() if state is None}:
            pipe.zrem(REHOME_SILENT, host)  # back, or nothing left on its queue: nothing to watch
            pipe.delete(rehome_since_key(host))
        watched = {host: state[0] for host, state in states.items() if state is not None}
        if watched:
            pipe.zadd(REHOME_SILENT, dict.fromkeys(watched, now), nx=True)
        for host, (since, stored, _) in ((h, s) for h, s in states.items() if s is not None):
            if not stored:
                pipe.set(rehome_since_key(host), str(since), px=SINCE_TTL_MS)
        await bounded(pipe.execute(), OP_TIMEOUT_S)
        for host in set(self._settled) - set(watched):
            del self._settled[host]
        due = [
            h
            for h, since in sorted(watched.items())
            if now >= since + self.after_ms and not self._unchanged(h, states, now)
        ]
        if due and not await self._trusted(epoch):
            return 0
        moved = 0
        for host in due:
            if moved >= MOVES_PER_SWEEP or await self._beats_now(host, now):
                continue
            queue = host_queue_name(host)
            await self._recover_stalled(queue)
            here = await self._move_jobs(queue, table, MOVES_PER_SWEEP - moved)
            moved += here
            state = states[host]
            if here == 0 and state is not None and state[2].active == 0:
                self._settled[host] = (state[2], now)  # nothing movable: not looked at again until it changes
            else:
                self._settled.pop(host, None)
        return moved

    def _unchanged(self, host: str, states: dict[str, SilentState | None], now: int) -> bool:
        """Whether a due host's queue is as the last attempt left it with nothing movable (only jobs bound to it):
        its counts and its last event the same, no job active, and that attempt under FULL_SCAN_MS ago."""
        settled, state = self._settled.get(host), states.get(host)
        return settled is not None and state is not None and settled[0] == state[2] and now - settled[1] < FULL_SCAN_MS

    async def _trusted(self, epoch: str | None) -> bool:
        """Whether the store is in the epoch the lease was granted in; after a failover the lease may be another's."""
        if await store_epoch(self.client) == epoch:
            return True
        self.log("rehome_lease_untrusted", {"reason": "the store failed over since the lease was granted"})
        return False

    async def _beats_now(self, host: str, now: int) -> bool:
        """Whether the host's own row says it is live now: the snapshot can be a beat behind a host that is back."""
        return host in await beating(self.client, [host], now)

    async def _rows(self, elected: bool) -> LiveHosts | None:
        if elected:
            view = await fleet_view(self.client, now=self.now)
            return view.live if isinstance(view, FleetView) else None
        live = await compact_registry(self.client)
        return live if isinstance(live, LiveHosts) else None

    async def _silent_states(
        self, hosts: list[str], rows: list[dict[str, object]], now: int
    ) -> dict[str, SilentState | None]:
        """Per silent host, in one round trip: since when it is silent, whether that is stored already, and what its
        queue holds (with its last event, which any add, move or removal changes); None when it holds nothing at
        all (no job waits for it to come back)."""
        pipe = self.client.pipeline(transaction=False)
        for host in hosts:
            queue = host_queue_name(host)
            pipe.get(rehome_since_key(host))
            for suffix, command in COUNTED[:4]:  # waiting, delayed, prioritized, active
                getattr(pipe, command)(bull_key(queue, suffix))
            pipe.xrevrange(bull_key(queue, "events"), count=1)
        answers = await bounded(pipe.execute(), OP_TIMEOUT_S) if hosts else []
        by_name = {str(row.get("name")): row for row in rows}
        states: dict[str, SilentState | None] = {}
        for index, host in enumerate(hosts):
            stored, *counts, last_event = answers[index * 6 : index * 6 + 6]
            if not any(int(count) for count in counts):
                states[host] = None
                continue
            stored_ms = reply_whole(stored)
            since = silent_since(by_name.get(host), stored_ms, now)
            waiting, delayed, prioritized, active = (int(count) for count in counts)
            held = QueueHeld(waiting, delayed, prioritized, active, reply_text(last_event[0][0]) if last_event else "")
            states[host] = (since if since is not None else now, stored_ms is not None, held)
        return states

    async def _recover_stalled(self, queue: str) -> None:
        """BullMQ's own check: active jobs whose lock has expired go back to waiting (two sweeps at most). One
        BullMQ connection serves every queue: each loads BullMQ's every script, too much to hold per silent host."""
        from pi_dispatch.infra.bullmq import StalledCheck

        if self._bullmq is None:
            self._bullmq = StalledCheck(self.store.queue_connection(), BULL_PREFIX)
        stalled = await bounded(self._bullmq.run(queue, MAX_STALLS, self.lock_duration_ms), OP_TIMEOUT_S)
        for job_id in stalled:
            self.log("job_stalled_on_silent_host", {"jobId": reply_text(job_id), "queue": queue})

    async def move_waiting(self, queue: str) -> int:
        """What waits on a draining host's own queue, moved to where the live fleet routes it now. A job that no
        live host serves stays: on the shared queue the hosts without its profile would refuse it for good."""
        view = await fleet_view(self.client, now=self.now)  # the drains as they are now: never onto a drained peer
        if not isinstance(view, FleetView):
            return 0
        table = RouteTable.from_hosts(view.live.hosts)
        return await self._move_jobs(queue, table, MOVES_PER_SWEEP, keep_unserved=True)

    async def _move_jobs(self, queue: str, table: RouteTable, budget: int, *, keep_unserved: bool = False) -> int:
        pipe = self.client.pipeline(transaction=False)
        pipe.lrange(bull_key(queue, "wait"), -budget, -1)  # the oldest first: the list's right end
        pipe.zrange(bull_key(queue, "delayed"), 0, budget - 1)
        pipe.zrange(bull_key(queue, "prioritized"), 0, budget - 1)
        waiting, delayed, prioritized = await bounded(pipe.execute(), OP_TIMEOUT_S)
        moved = 0
        for job_id in [*reversed(waiting), *delayed, *prioritized][:budget]:
            moved += await self.move(queue, reply_text(job_id), table, keep_unserved=keep_unserved)
        return moved

    async def move(self, source: str, job_id: str, table: RouteTable, *, keep_unserved: bool = False) -> int:
        """Move one waiting, delayed or prioritized job to the queue the table routes it to: 1 moved, 0 not."""
        data_text, deduplication = await bounded(
            self.client.hmget(bull_key(source, job_id), ["data", "deid"]), OP_TIMEOUT_S
        )
        try:
            data = json.loads(data_text) if data_text is not None else None
        except ValueError:
            data = None  # unreadable data needs nothing host-specific, as far as anyone can tell
        if isinstance(data, dict) and data.get("kind") == LOCAL_KIND:
            return 0  # bound to its host's folder and scheduler: it waits for that host
        needs = job_needs(data)
        if keep_unserved and not table.serves(needs):
            return 0
        host = table.route(needs, job_id)
        target = host_queue_name(host) if host is not None else SHARED_QUEUE
        if target == source:
            return 0
        dedup_id = reply_text(deduplication)
        result = await self._mover.move(source, target, job_id, dedup_id)
        if isinstance(result, str):
            self.log("job_rehomed", {"jobId": job_id, "from": source, "to": target, "state": result})
            return 1
        if result == ID_TAKEN:
            self.log("job_rehome_blocked", {"jobId": job_id, "from": source, "to": target, "reason": "id-taken"})
        return 0

    async def close(self) -> None:
        if self._bullmq is not None:
            with contextlib.suppress(*STORE_FAULTS):
                await bounded(self._bullmq.close(), OP_TIMEOUT_S)
            self._bullmq = None
