"""BullMQ behind one door: every use of the Python package's internals is here, and nowhere else.

The rest of the package uses BullMQ's public names (`Queue`, `Worker`, `Job`, its errors). What it needs beyond
them: a worker driven by our own pickup rather than by BullMQ's run loop (its lock manager, stalled-job timer,
fetch and process steps, its wake-up marker and blocking connection), the connection a Queue added on (for a
replicated store's WAIT), BullMQ's stalled-job script on a queue no worker holds, and the repeat strategy its
scheduler computes cron runs with. Each private attribute those use is listed in `PRIVATE_CONTRACT`, which
`tests/infra/test_bullmq.py` holds against the installed package, naming the one an upgrade moved; the version is
pinned exactly in pyproject.toml for the same reason.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
from collections.abc import Mapping
from typing import Any, Final

from bullmq import Worker
from bullmq.job_scheduler import default_repeat_strategy
from bullmq.redis_connection import RedisConnection
from bullmq.scripts import Scripts
from bullmq.timer import Timer

from pi_dispatch.infra.valkey import STORE_FAULTS, outages_named

NAMING_WAIT_S: Final = 5.0  # a close waits this long for a start's CLIENT SETNAME: a live store answers in ms

# What this module reads or writes of BullMQ beyond its public names, by the object that has it.
PRIVATE_CONTRACT: Final[Mapping[str, tuple[str, ...]]] = {
    "Worker": (
        "_ensure_client_names",
        "lockManager",
        "runStalledJobsCheck",
        "closed",
        "running",
        "paused",
        "closing",
        "blockUntil",
        "moveToActive",
        "waitForJob",
        "nextJobFromJobData",
        "processJob",
        "processing",
        "waiting",
        "resume_event",
        "isConnectionError",
        "keys",
        "id",
        "opts",
        "clientName",
        "backend",
        "blockingRedisConnection",
        "redisConnection",
    ),
    "Worker.backend": ("bclient", "conn", "close"),
    "Worker.lockManager": ("start", "close"),
    "Queue.client": ("connection",),
    "Scripts": ("moveStalledJobsToWait",),
}


def node_client_name(queue: str, prefix: str = "bull", worker: str | None = None) -> str:
    """The name Node's BullMQ gives a worker's connections: the prefix, the queue's name in base64, and `:w:<name>`
    for a named worker."""
    return f"{prefix}:{base64.b64encode(queue.encode()).decode()}" + (f":w:{worker}" if worker else "")


class DrivenWorker(Worker):  # type: ignore[misc]  # bullmq is untyped
    """A BullMQ Worker that does not run its own loop: the caller starts its background work (`start_background`),
    takes jobs (`take`), starts them (`process`) and waits on its marker (`pop_markers`). It keeps the times
    liveness is judged by: when it last asked the store for a job, when it last took one, and since when a call
    that asks has been waiting (None when none is)."""

    def __init__(self, name: str, processor: Any, opts: dict[str, Any]) -> None:
        super().__init__(name, processor, opts)
        # Named as Node's BullMQ names a worker's connections, so Node's tools (`Queue.getWorkers()`, bull-board)
        # list this worker among the queue's; the Python client's own name is the queue's plain key prefix.
        self.clientName = node_client_name(name, opts.get("prefix") or "bull", opts.get("name"))
        self.polled_at_ms = 0  # wall clock, for the row and the metrics
        self.took_at_ms = 0
        self.blocked_since: float | None = None  # monotonic
        self.fetching_since: float | None = None
        self._stalled_timer: Timer | None = None  # BullMQ's stalled-job check, while the pickup drives it
        self._naming: asyncio.Future[None] | None = None  # the start's naming of its connections, while under way

    # -- state
    @property
    def is_paused(self) -> bool:
        return bool(self.paused)

    @property
    def is_closing(self) -> bool:
        return bool(self.closing)

    @property
    def marker_key(self) -> str:
        return str(self.keys["marker"])

    @property
    def token_prefix(self) -> str:
        return str(self.id)

    def stalled_for(self, now: float) -> float:
        """How long the call that asks the store for a job has been waiting: 0 when none is in flight."""
        started = [since for since in (self.blocked_since, self.fetching_since) if since is not None]
        return now - min(started) if started else 0.0

    # -- the work BullMQ's run loop would do
    async def start_background(self) -> None:
        """What BullMQ's `run` starts: its connections named, its lock renewals, its stalled-job check. Nothing,
        once it is closing."""
        if self.closing:
            return
        self._naming = asyncio.ensure_future(self._ensure_client_names())
        try:
            await self._naming
        except (KeyError, *STORE_FAULTS):  # a close that could not wait for it: redis-py's release fails, KeyError
            if not self.closing:
                raise
        finally:
            self._naming = None
        if self.closing:
            return
        self.lockManager.start()
        self._stalled_timer = Timer(self.opts["stalledInterval"] / 1000, self.runStalledJobsCheck, self.emit)
        self.running = True

    async def close(self, force: bool = False) -> None:
        """BullMQ's close, once a start's naming of the connections is over (up to NAMING_WAIT_S): a pool closed
        under that command forgets the connection, leaving its socket open and its release failing."""
        if (naming := self._naming) is not None:
            await asyncio.wait({naming}, timeout=NAMING_WAIT_S)
        await super().close(force)

    async def stop_background(self) -> None:
        self.running = False
        if self._stalled_timer is not None:
            self._stalled_timer.stop()
        with contextlib.suppress(*STORE_FAULTS), outages_named():  # the store away: the locks lapse as they would
            await self.lockManager.close()

    async def take(self, token: str) -> tuple[Any, int]:
        """The next job of its queue under `token` (None: none waits), and when the first delayed one is due
        (epoch ms, 0: none)."""
        self.blockUntil = 0
        job = await self.moveToActive(token)
        return job, int(self.blockUntil or 0)

    def process(self, job: Any, token: str) -> asyncio.Task[Any]:
        """Run the job's processor as BullMQ would (its lock renewed, its outcome written), counted as in hand."""
        task: asyncio.Task[Any] = asyncio.ensure_future(self.processJob(job, token))
        self.processing.add(task)
        task.add_done_callback(self.processing.discard)
        return task

    def hold_wait(self, waiting: asyncio.Future[Any] | None) -> None:
        """The pop under way on its behalf: pause() and close() cancel it, as they would BullMQ's own."""
        self.waiting = waiting

    async def resumed(self) -> None:
        await self.resume_event.wait()

    def report(self, error: BaseException) -> None:
        """An error of a step, heard by its `error` listeners unless it is a lost connection (BullMQ's rule)."""
        if not self.isConnectionError(error):
            self.emit("error", error)

    async def warm_up(self) -> None:
        """Its connections opened and the server's version read now: BullMQ's delays otherwise fire on whole
        seconds until it is known."""
        await self.blockingRedisConnection.getRedisVersion()
        await self.redisConnection.getRedisVersion()

    async def pop_markers(self, markers: list[str], timeout_s: float) -> Any:
        """One blocking pop on several queues' wake-up markers (this consumer's blocking connection), timed for
        liveness as BullMQ's own wait is."""
        self.blocked_since = time.monotonic()
        try:
            return await self.backend.bclient.bzpopmin(markers, timeout_s)
        finally:
            self.blocked_since = None
            self._polled()

    async def put_marker_back(self, key: str, member: Any, score: Any) -> None:
        await self.backend.conn.zadd(key, {member: score})

    async def drop_connections(self) -> None:
        """Close this consumer's connections outright, once its driver has ended: a close BullMQ could not finish
        (the store gone while a job's last write retries), or a command sent after the close, which reopens a
        single-connection client. Its sockets go with the worker rather than with the collector, whenever."""
        await self.backend.close(force=True)

    # -- BullMQ's own steps, timed
    def _polled(self) -> None:
        self.polled_at_ms = int(time.time() * 1000)

    async def waitForJob(self) -> int:
        self.blocked_since = time.monotonic()
        try:
            return int(await super().waitForJob())
        finally:
            self.blocked_since = None
            self._polled()

    async def moveToActive(self, token: str) -> Any:
        self.fetching_since = time.monotonic()
        try:
            job = await super().moveToActive(token)
        finally:
            self.fetching_since = None
        self._polled()
        if job is not None:
            self.took_at_ms = self.polled_at_ms
        return job

    async def nextJobFromJobData(
        self,
        job_data: dict[str, Any] | None = None,
        job_id: str | None = None,
        limit_until: int = 0,
        delay_until: int = 0,
        token: str | None = None,
    ) -> Any:
        """The job BullMQ makes of what it fetched, unless `refused` takes it first (None: nothing to run)."""
        if job_data is not None and job_id and token is not None and await self.refused(job_data, job_id, token):
            return None
        try:
            job = await super().nextJobFromJobData(job_data, job_id, limit_until, delay_until, token)
        except (RecursionError, ValueError, TypeError) as error:
            if not job_data or not job_id or token is None:
                raise
            await self.unreadable(job_data, job_id, token, error)
            return None
        if job is not None and job_data is not None:
            self.taken(job, job_data)
        return job

    # -- what a subclass decides
    async def refused(self, job_data: dict[str, Any], job_id: str, token: str) -> bool:
        """Whether to fail the fetched job before BullMQ reads it (True: handled here)."""
        del job_data, job_id, token
        return False

    async def unreadable(self, job_data: dict[str, Any], job_id: str, token: str, error: Exception) -> None:
        """A fetched job BullMQ could not read."""
        raise error

    def taken(self, job: Any, job_data: dict[str, Any]) -> None:
        """A job BullMQ read, before it runs."""


def add_connection(queue: Any) -> Any:
    """The one connection a Queue opened on a single-connection client added on (its host and port, `disconnect`)."""
    return queue.client.connection


class StalledCheck:
    """BullMQ's own stalled-job check on any queue, over one connection for them all: active jobs whose lock has
    expired go back to waiting (failed past `max_stalls`)."""

    def __init__(self, connection: Any, prefix: str) -> None:
        self._connection = RedisConnection(connection)
        self.prefix = prefix

    async def run(self, queue: str, max_stalls: int, lock_duration_ms: int) -> list[Any]:
        scripts = Scripts(self.prefix, queue, self._connection)
        return list(await scripts.moveStalledJobsToWait(max_stalls, lock_duration_ms) or [])

    async def close(self) -> None:
        await self._connection.close()


def next_repeat_ms(millis: int, options: Mapping[str, Any]) -> int | None:
    """When BullMQ's scheduler runs a repeat next after `millis` (epoch ms), with its own strategy."""
    found = default_repeat_strategy(millis, dict(options))
    return None if found is None else int(found)
