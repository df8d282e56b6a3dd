"""Steering one job from any machine: cancel it wherever it is, or run a finished one again, routed anew.

A cancel is a fact first (`fleet/control.py`), so it holds whatever happens next. A job still waiting or held is
failed where it stands as `cancelled`, atomically (`lua/cancel.lua`), keeping its data for a retry, and the
cancel is recorded in the fleet's history; a running one is stopped by its host, which records it. A retry puts a
failed, refused, timed-out or cancelled job back as BullMQ's own retry does (on its queue, its attempts fresh,
its wait hold cleared), then moves it, atomically, to the queue the live fleet routes it to now, as a delivery
would be routed. Neither ever removes a job: a step that fails leaves it where it was, to try again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from pi_dispatch.core.capabilities import job_needs
from pi_dispatch.core.jobs import LOCAL_KIND
from pi_dispatch.core.jscompat import iso_string, js_json_parse
from pi_dispatch.core.keys import BULL_PREFIX, SHARED_QUEUE, bull_key, host_queue_name, run_record_key, worker_of_queue
from pi_dispatch.core.names import record_stem
from pi_dispatch.core.reasons import Reason
from pi_dispatch.core.records import build_record
from pi_dispatch.core.routing import RouteTable
from pi_dispatch.core.waits import HOLD_KEY
from pi_dispatch.fleet.control import clear_cancel, request_cancel
from pi_dispatch.fleet.jobhistory import JobHistory
from pi_dispatch.fleet.locate import Located, candidate_queues, locate
from pi_dispatch.fleet.mirror import RunMirror, mirror_window_ms
from pi_dispatch.fleet.registry import LiveHosts, read_live_hosts
from pi_dispatch.infra.store import StoreAddress
from pi_dispatch.infra.valkey import OP_TIMEOUT_S, bounded, packaged_script, reply_text

if TYPE_CHECKING:
    import redis.asyncio as aioredis

QUEUED: Final = frozenset({"waiting", "delayed", "prioritized", "paused"})
POLL_S: Final = 0.1
RETRY_MAX: Final = 1_000  # one `retry --failed` takes at most this many
RETENTION_DAYS: Final = 30  # the CLI's records of a cancel live as long as a worker's default


@dataclass(frozen=True)
class Cancelled:
    """How a cancel ended: `cancelled` (from `queued` or `running`), `finished` before it, `missing`, or `pending`
    (its host has not met it yet: it will stop the job when it does)."""

    result: str
    job: Located | None = None
    was: str | None = None
    seconds: float = 0.0


def _cancelled(job: Located) -> bool:
    return job.state == "failed" and (job.failed_reason or "").startswith((Reason.OPERATOR_CANCEL, Reason.CANCELLED))


async def queues_for(client: aioredis.Redis, job_id: str | None) -> list[str]:
    """The queues a job may be on: the shared one, every registered host's, and those of the hosts that ran it."""
    from pi_dispatch.core.names import record_stem
    from pi_dispatch.fleet.jobhistory import read_attempts
    from pi_dispatch.fleet.registry import LiveHosts, read_live_hosts

    live = await read_live_hosts(client)
    rows = live.hosts if isinstance(live, LiveHosts) else []
    history = await read_attempts(client, record_stem(job_id)) if job_id is not None else []
    return candidate_queues(rows, [record.get("host") for record in history])


async def cancel_job(
    client: aioredis.Redis, job_id: str, queues: list[str], *, now: Callable[[], int], wait_s: float
) -> Cancelled:
    found = await locate(client, job_id, queues)
    if not found:
        return Cancelled("missing")
    job = found[0]
    if job.finished:
        return Cancelled("finished", job)
    began = time.monotonic()
    await request_cancel(client, job_id, now())
    script = client.register_script(packaged_script("cancel"))
    while True:
        if job.state in QUEUED:
            keys = [bull_key(job.queue, name) for name in ("wait", "delayed", "prioritized", "paused", "failed")]
            keys += [bull_key(job.queue, job_id), bull_key(job.queue, f"{job_id}:lock"), bull_key(job.queue, "events")]
            args = [job_id, str(now()), str(Reason.OPERATOR_CANCEL), f"{BULL_PREFIX}:{job.queue}:"]
            left = await bounded(script(keys=keys, args=args), OP_TIMEOUT_S)
            if isinstance(left, bytes | str):
                await _record_cancel(client, job, now())
                return Cancelled("cancelled", job, "queued", time.monotonic() - began)
        elif _cancelled(job):
            return Cancelled("cancelled", job, "running", time.monotonic() - began)
        elif job.finished:  # it ended before the cancel reached it: the fact goes, so nothing else changes
            await clear_cancel(client, job_id)
            return Cancelled("finished", job)
        if time.monotonic() - began >= wait_s:
            return Cancelled("pending", job, job.state, time.monotonic() - began)
        await asyncio.sleep(POLL_S)
        found = await locate(client, job_id, [job.queue])
        if not found:
            await clear_cancel(client, job_id)
            return Cancelled("missing")
        job = found[0]


async def _record_cancel(client: aioredis.Redis, job: Located, now_ms: int) -> None:
    """The cancel of a job no worker held, in the fleet's history (a worker records the cancels it carries out)."""
    data = job.data if isinstance(job.data, dict) else {}
    record = build_record(
        data=data,
        result=None,
        error={"reason": Reason.OPERATOR_CANCEL},
        job_id=job.job_id,
        job_name=job.name,
        attempts_made=job.attempts_made,
        started_at=None,
        ended_at=iso_string(now_ms),
        host=worker_of_queue(job.queue) or "",  # the host whose queue it waited on; none on the shared queue
    )
    window = int(mirror_window_ms(RETENTION_DAYS))
    stem = record_stem(job.job_id)
    await RunMirror(client, RETENTION_DAYS).mirror(record, stem)
    await JobHistory(client, window).remember(record, stem)


@dataclass(frozen=True)
class Retried:
    """How a retry ended: `queued` (on `queue`), `unfinished` (still on its way), `succeeded` (nothing to run
    again), or `missing`."""

    result: str
    job: Located | None = None
    queue: str | None = None


async def retry_job(client: aioredis.Redis, store: StoreAddress, job_id: str, queues: list[str]) -> Retried:
    from bullmq import Job, Queue

    found = await locate(client, job_id, queues)
    if not found:
        return Retried("missing")
    job = found[0]
    if not job.finished:
        return Retried("unfinished", job)
    if job.state == "completed" and job.outcome != "policy":  # a refused job completes too, as `policy`
        return Retried("succeeded", job)
    await clear_cancel(client, job_id)
    queue = Queue(job.queue, {"connection": store.queue_connection()})
    try:
        held = await Job.fromId(queue, job_id)
        if held is None:
            return Retried("missing")
        if isinstance(job.data, dict) and HOLD_KEY in job.data:  # a new run starts its wait hold afresh
            await held.updateData({key: value for key, value in job.data.items() if key != HOLD_KEY})
        await held.retry(job.state, {"resetAttemptsMade": True, "resetAttemptsStarted": True})
    finally:
        await queue.close()
    return Retried("queued", job, await _route_again(client, store, job))


async def _route_again(client: aioredis.Redis, store: StoreAddress, job: Located) -> str:
    """Where the retried job runs: the queue the live fleet routes it to now (a local job stays on its host's)."""
    from pi_dispatch.fleet.rehome import Rehomer

    data = job.data if isinstance(job.data, dict) else None
    live = await read_live_hosts(client)
    if data is None or data.get("kind") == LOCAL_KIND or not isinstance(live, LiveHosts):
        return job.queue
    table = RouteTable.from_hosts(live.hosts)
    host = table.route(job_needs(data), job.job_id)
    target = host_queue_name(host) if host is not None else SHARED_QUEUE
    if target == job.queue:
        return job.queue
    mover = Rehomer(client, store, after_ms=0, lock_duration_ms=0)
    moved = await mover.move(job.queue, job.job_id, table)
    return target if moved else job.queue


async def failed_jobs(
    client: aioredis.Redis, queues: list[str], *, since_ms: int, host: str | None, limit: int = RETRY_MAX
) -> list[tuple[str, str]]:
    """The failed jobs of these queues since a time, oldest first, each with its queue; with host, those whose last
    attempt ran there (by its record; a job with none, by its queue). Two round trips."""
    pipe = client.pipeline(transaction=False)
    for queue in queues:
        pipe.zrangebyscore(bull_key(queue, "failed"), since_ms, "+inf", start=0, num=limit)
    answers = await bounded(pipe.execute(), OP_TIMEOUT_S)
    found = [(reply_text(job_id), queue) for queue, ids in zip(queues, answers, strict=True) for job_id in ids][:limit]
    if host is None or not found:
        return found
    bodies = await bounded(client.mget([run_record_key(record_stem(job_id)) for job_id, _ in found]), OP_TIMEOUT_S)
    kept = []
    for (job_id, queue), body in zip(found, bodies, strict=True):
        record = _parsed(body)
        ran = record.get("host") if isinstance(record, dict) else worker_of_queue(queue)
        if ran == host:
            kept.append((job_id, queue))
    return kept


def _parsed(body: object) -> Any:
    try:
        return js_json_parse(body) if isinstance(body, bytes | str) else None
    except ValueError:
        return None
