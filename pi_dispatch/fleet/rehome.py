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
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from pi_dispatch.core.capabilities import RouteTable, job_needs
from pi_dispatch.core.jobs import LOCAL_KIND
from pi_dispatch.core.jscompat import DAY_MS
from pi_dispatch.core.keys import (
    HOST_QUEUE_META_PATTERN,
    REHOME_LEASE,
    SHARED_QUEUE,
    bull_key,
    host_queue_name,
    queue_of_meta_key,
    rehome_since_key,
    worker_of_queue,
)
from pi_dispatch.fleet.hosts import HostQueue, QueueCounts, silent_since
from pi_dispatch.fleet.moves import ID_TAKEN, JobMover
from pi_dispatch.fleet.registry import LiveHosts, read_live_hosts
from pi_dispatch.infra.clock import wall_ms
from pi_dispatch.infra.events import EventLog, discard
from pi_dispatch.infra.valkey import OP_TIMEOUT_S, bounded, describe

if TYPE_CHECKING:
    import redis.asyncio as aioredis

SWEEP_S: Final = 15.0  # at most; a shorter threshold sweeps a quarter of it
LEASE_MS: Final = 30_000
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
        found.update(queue for key in keys if (queue := queue_of_meta_key(_text(key))) is not None)
        if int(cursor) == 0:
            return sorted(found)


async def queue_counts(client: aioredis.Redis, queue: str, timeout_s: float = OP_TIMEOUT_S) -> QueueCounts:
    pipe = client.pipeline(transaction=False)
    pipe.llen(bull_key(queue, "wait"))
    pipe.zcard(bull_key(queue, "delayed"))
    pipe.zcard(bull_key(queue, "prioritized"))
    pipe.llen(bull_key(queue, "active"))
    pipe.zcard(bull_key(queue, "failed"))
    waiting, delayed, prioritized, active, failed = await bounded(pipe.execute(), timeout_s)
    return QueueCounts(int(waiting), int(delayed), int(prioritized), int(active), int(failed))


async def read_host_queues(
    client: aioredis.Redis,
    hosts: list[dict[str, object]],
    now_ms: int,
    timeout_s: float = OP_TIMEOUT_S,
    names: list[str] | None = None,
) -> list[HostQueue]:
    """Each host queue (`names`, else every one a SCAN finds) with its counts and its host's silence, for the
    re-homer, `hosts`, `audit --live` and `top`."""
    rows = {str(row.get("name")): row for row in hosts}
    found = []
    for queue in names if names is not None else await host_queue_names(client, timeout_s):
        host = worker_of_queue(queue) or ""
        stored = await bounded(client.get(rehome_since_key(host)), timeout_s)
        stored_ms = int(stored) if stored is not None and _text(stored).isdigit() else None
        since = silent_since(rows.get(host), stored_ms, now_ms)
        oldest = await oldest_waiting_ms(client, queue, timeout_s)
        found.append(HostQueue(queue, host, await queue_counts(client, queue, timeout_s), since, oldest))
    return found


async def oldest_waiting_ms(client: aioredis.Redis, queue: str, timeout_s: float = OP_TIMEOUT_S) -> int | None:
    """When the job that has waited longest on a queue was added (BullMQ pushes new jobs at the left)."""
    job_id = await bounded(client.lindex(bull_key(queue, "wait"), -1), timeout_s)
    if job_id is None:
        return None
    stamp = await bounded(client.hget(bull_key(queue, _text(job_id)), "timestamp"), timeout_s)
    text = _text(stamp) if stamp is not None else ""
    return int(text) if text.isdigit() else None


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


@dataclass
class Rehomer:
    """One worker's share of re-homing: a sweep every SWEEP_S, which does work only while it holds the lease."""

    client: aioredis.Redis
    connection: str  # for BullMQ's own stalled-job script on the dead host's queue
    after_ms: int
    lock_duration_ms: int
    log: EventLog = discard
    now: Callable[[], int] = wall_ms
    _queues: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._mover = JobMover(self.client)

    async def run_forever(self, stop: asyncio.Event) -> None:
        interval = min(SWEEP_S, self.after_ms / 4000)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)
            if stop.is_set():
                return
            try:
                await self.sweep()
            except Exception as error:  # an outage: the next sweep tries again
                self.log("rehome_sweep_failed", {"reason": describe(error)})

    async def sweep(self) -> int:
        """Re-home what is due; returns how many jobs moved. Does nothing without the lease."""
        token = secrets.token_hex(8)
        if not await bounded(self.client.set(REHOME_LEASE, token, nx=True, px=LEASE_MS), OP_TIMEOUT_S):
            return 0
        try:
            return await self._sweep()
        finally:
            with contextlib.suppress(Exception):
                if _text(await bounded(self.client.get(REHOME_LEASE), OP_TIMEOUT_S) or b"") == token:
                    await bounded(self.client.delete(REHOME_LEASE), OP_TIMEOUT_S)

    async def _sweep(self) -> int:
        live = await read_live_hosts(self.client)
        if not isinstance(live, LiveHosts):
            return 0  # an unreadable registry is not evidence that anyone is dead
        now = self.now()
        table = RouteTable.from_hosts(live.hosts)
        moved = 0
        for queue in await read_host_queues(self.client, live.hosts, now):
            key = rehome_since_key(queue.host)
            if queue.silent_since_ms is None:
                await bounded(self.client.delete(key), OP_TIMEOUT_S)
                continue
            await bounded(self.client.set(key, str(queue.silent_since_ms), px=SINCE_TTL_MS), OP_TIMEOUT_S)
            due = queue.due_ms(self.after_ms)
            if due is None or now < due or moved >= MOVES_PER_SWEEP:
                continue
            await self._recover_stalled(queue.queue)
            moved += await self._move_jobs(queue.queue, table, MOVES_PER_SWEEP - moved)
        return moved

    async def _recover_stalled(self, queue: str) -> None:
        """BullMQ's own check: active jobs whose lock has expired go back to waiting (two sweeps at most)."""
        if queue not in self._queues:
            from bullmq import Queue

            self._queues[queue] = Queue(queue, {"connection": self.connection})
        stalled = await bounded(
            self._queues[queue].scripts.moveStalledJobsToWait(MAX_STALLS, self.lock_duration_ms), OP_TIMEOUT_S
        )
        for job_id in stalled or []:
            self.log("job_stalled_on_silent_host", {"jobId": _text(job_id), "queue": queue})

    async def move_waiting(self, queue: str) -> int:
        """What waits on a draining host's own queue, moved to where the live fleet routes it now. A job that no
        live host serves stays: on the shared queue the hosts without its profile would refuse it for good."""
        live = await read_live_hosts(self.client)
        if not isinstance(live, LiveHosts):
            return 0
        return await self._move_jobs(queue, RouteTable.from_hosts(live.hosts), MOVES_PER_SWEEP, keep_unserved=True)

    async def _move_jobs(self, queue: str, table: RouteTable, budget: int, *, keep_unserved: bool = False) -> int:
        pipe = self.client.pipeline(transaction=False)
        pipe.lrange(bull_key(queue, "wait"), -budget, -1)  # the oldest first: the list's right end
        pipe.zrange(bull_key(queue, "delayed"), 0, budget - 1)
        pipe.zrange(bull_key(queue, "prioritized"), 0, budget - 1)
        waiting, delayed, prioritized = await bounded(pipe.execute(), OP_TIMEOUT_S)
        moved = 0
        for job_id in [*reversed(waiting), *delayed, *prioritized][:budget]:
            moved += await self.move(queue, _text(job_id), table, keep_unserved=keep_unserved)
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
        dedup_id = _text(deduplication) if deduplication is not None else ""
        result = await self._mover.move(source, target, job_id, dedup_id)
        if isinstance(result, str):
            self.log("job_rehomed", {"jobId": job_id, "from": source, "to": target, "state": result})
            return 1
        if result == ID_TAKEN:
            self.log("job_rehome_blocked", {"jobId": job_id, "from": source, "to": target, "reason": "id-taken"})
        return 0

    async def close(self) -> None:
        for queue in self._queues.values():
            with contextlib.suppress(Exception):
                await bounded(queue.close(), OP_TIMEOUT_S)
        self._queues.clear()
