"""Slot-gated pickup: this host takes a job only when it can start it, and takes work a peer cannot start.

One loop per worker drives BullMQ's own Workers (one per queue; each keeps its jobs' locks, its stalled-job check,
pause and close) by manual fetching: it takes a machine slot first, then asks its own queue (work only it, or few,
can run), then the shared one, then its peers' (`fleet/steal.py`), with BullMQ's own `moveToActive`. With nothing
to take it waits on both queues' wake-up markers in one blocking pop, so a consumer never sleeps on a marker while
it has no slot; a marker it woke on but could not act on (its slots filled first) is put back for the next host.

A job counts against the slots from the moment it is taken until its attempt ends, its gates included (a wait
check, secret resolution); a job its wait gate holds goes back to the delayed set and frees its slot at once, so a
held job never holds a slot. `held` is what the row's `slotsFree` and the metrics count.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol

from pi_dispatch.core.jobs import QueuedJob
from pi_dispatch.fleet.rehome import MAX_STALLS
from pi_dispatch.infra.events import EventLog, discard
from pi_dispatch.infra.store import StoreAddress
from pi_dispatch.infra.valkey import STORE_FAULTS, bounded
from pi_dispatch.worker.metrics import WorkerMetrics
from pi_dispatch.worker.take.consumers import GuardedConsumer

if TYPE_CHECKING:
    from pi_dispatch.config.worker_settings import WorkerSettings
    from pi_dispatch.core.reasons import Reason
    from pi_dispatch.fleet.steal import Stealer, Waiting

BLOCK_CEILING_S: Final = 10.0  # BullMQ's own ceiling on one blocking pop
BLOCK_FLOOR_S: Final = 0.001
RETRY_FIRST_S: Final = 0.25  # after a store error; doubled up to RETRY_CEILING_S, each wait jittered
# A store that fails over is back within seconds: retrying at most a second apart finds the new primary at once
# (a try costs one connection attempt), and the jitter keeps a fleet's workers from retrying in step.
RETRY_CEILING_S: Final = 1.0
BLOCKED_RECHECK_S: Final = 1.0  # how soon a worker that could not record looks again (the beat retries the disk)
Marker = tuple[bytes, bytes, float]  # (key, member, score) as BZPOPMIN answers


class Attempter(Protocol):
    """What the consumers hand each job they take to (`attempts.py`): taking a job knows nothing of what follows."""

    async def process(self, job: QueuedJob, token: str, queue: str) -> dict[str, object]: ...

    def failed_unread(self, job: Any, reason: Reason) -> None: ...

    def failed_unrun(self, job: Any, error: Any, *_: Any) -> None: ...


@dataclass
class Pickup:
    """Takes jobs for one worker. `consumers` are its BullMQ Workers, its own queue's first."""

    consumers: Sequence[GuardedConsumer]
    concurrency: int
    idle_poll_s: float
    stealer: Stealer | None = None
    steal: bool = True  # False: look at peers' backlogs (for the metrics) but never move a job
    log: EventLog = discard
    metrics: WorkerMetrics = field(default_factory=lambda: WorkerMetrics(enabled=False))
    held: dict[str, str] = field(default_factory=dict)  # job id -> the queue it was taken from
    blocked: Callable[[], bool] = lambda: False  # a run's record waits for the disk: take nothing new meanwhile
    idle_counted_s: float = 0.0  # free slot-seconds while a job this host could run waited on a peer
    steals: int = 0
    _freed: asyncio.Event = field(default_factory=asyncio.Event)
    _tokens: int = 0
    _capable_waiting: bool = False
    _idle_since: float | None = None  # monotonic: the wait under way began with capable work waiting
    _popped: Marker | None = None  # the marker the last blocking pop took, until its queue has been asked

    @property
    def free(self) -> int:
        return max(0, self.concurrency - len(self.held))

    @property
    def idle_capable_s(self) -> float:
        """Free slot-seconds so far while a job this host could run waited on a peer's queue."""
        ongoing = self.free * (time.monotonic() - self._idle_since) if self._idle_since is not None else 0.0
        return self.idle_counted_s + ongoing

    async def run(self) -> None:
        """Take jobs until the consumers are closed."""
        for consumer in self.consumers:
            await consumer.start_background()
        retry_s = RETRY_FIRST_S
        try:
            while not self._closing():
                try:
                    await self._step()
                    retry_s = RETRY_FIRST_S
                except Exception as error:  # broad as BullMQ's own loop: its errors come untyped
                    self.consumers[0].report(error)
                    await asyncio.sleep(retry_s * random.uniform(0.5, 1.0))
                    retry_s = min(RETRY_CEILING_S, self.idle_poll_s, retry_s * 2)
        finally:
            for consumer in self.consumers:
                await consumer.stop_background()

    async def _step(self) -> None:
        if self.blocked():
            await asyncio.sleep(BLOCKED_RECHECK_S)
            return
        if self._paused():
            for consumer in self.consumers:
                await consumer.resumed()
            return
        if self.free == 0:
            self._freed.clear()
            await self._freed.wait()
            return
        asked: set[str] = set()
        due_ms = await self._take_what_fits(asked)
        await self._pass_on(asked)
        if self.free == 0 or self._paused() or self._closing():
            return
        if (stolen_due := await self._steal_or_look()) is not None:
            if stolen_due == 0:
                return  # stolen onto the own queue: the next step takes it
            due_ms = min(due_ms, stolen_due) if due_ms else stolen_due
        await self._wait_for_work(due_ms)

    async def _take_what_fits(self, asked: set[str]) -> int:
        """Take from each queue in turn while slots are free; returns the earliest delayed job's due time (0: none).
        Slots that fill say at once whether work still waits on the own queue, for idle peers to steal."""
        due_ms, was_free = 0, self.free
        for consumer in self.consumers:
            while self.free > 0 and not self._paused() and not self._closing() and not self.blocked():
                asked.add(consumer.name)
                token = self._token(consumer)
                job, block_until = await consumer.take(token)
                if job is None:
                    if block_until:
                        due_ms = min(due_ms, block_until) if due_ms else block_until
                    break
                self._start(consumer, job, token)
        if was_free and not self.free and self.stealer is not None:
            await self.stealer.offer()
        return due_ms

    async def _steal_or_look(self) -> int | None:
        """Steal the oldest job a peer holds that this host can run: 0 once moved; else when the first one
        becomes stealable (epoch ms), or None when there is none."""
        if self.stealer is None:
            return None
        candidates = await self.stealer.find()
        self._capable_waiting = bool(candidates)
        if not self.steal:
            return None
        for job in candidates:
            if not self.stealer.stealable(job):
                return job.enqueued_ms + self.stealer.after_ms
            if await self.stealer.take(job):
                self._stolen(job)
                return 0
        return None

    def _stolen(self, job: Waiting) -> None:
        self.steals += 1
        self._capable_waiting = False
        waited_ms = max(0, self.stealer.now() - job.enqueued_ms) if self.stealer is not None else 0
        self.log("job_stolen", {"jobId": job.job_id, "from": job.queue, "waitedMs": waited_ms})

    async def _wait_for_work(self, due_ms: int) -> None:
        """One blocking pop on every queue's marker, until a job may be there or the idle poll is over."""
        if self._paused() or self._closing():  # paused or closed while it looked elsewhere: a pop now would reopen
            return  # the closed connection, and pause/close could not cancel it
        timeout_s = self.idle_poll_s
        if due_ms:
            timeout_s = min(BLOCK_CEILING_S, max(BLOCK_FLOOR_S, (due_ms - time.time() * 1000) / 1000))
        markers = [c.marker_key for c in self.consumers]
        waiting = asyncio.ensure_future(self.consumers[0].pop_markers(markers, timeout_s))
        for consumer in self.consumers:
            consumer.hold_wait(waiting)
        if self._capable_waiting and self.free:
            self._idle_since = time.monotonic()
        try:
            await asyncio.wait([waiting])
        finally:
            for consumer in self.consumers:
                consumer.hold_wait(None)
            if not waiting.done():
                waiting.cancel()
            self._count_idle()
        if not waiting.cancelled():
            self._popped = waiting.result()

    async def _pass_on(self, asked: set[str]) -> None:
        """The marker this host woke on goes back when its queue was not asked (the slots filled first), so the
        next host wakes for the job instead of sleeping until its idle poll."""
        popped, self._popped = self._popped, None
        if popped is None or self._closing():
            return
        key = popped[0].decode() if isinstance(popped[0], bytes) else str(popped[0])
        woke = next((c for c in self.consumers if c.marker_key == key), None)
        if woke is not None and woke.name not in asked:
            await woke.put_marker_back(key, popped[1], popped[2])  # a second wake costs a poll, no more

    def _count_idle(self) -> None:
        if self._idle_since is not None:
            idle = self.free * (time.monotonic() - self._idle_since)
            self._idle_since = None
            self.idle_counted_s += idle
            self.metrics.idled(idle)

    def _start(self, consumer: GuardedConsumer, job: Any, token: str) -> None:
        job_id = str(job.id)
        self.held[job_id] = consumer.name
        task = consumer.process(job, token)

        def release(_: asyncio.Future[Any]) -> None:
            self.held.pop(job_id, None)
            self._freed.set()

        task.add_done_callback(release)

    def _token(self, consumer: GuardedConsumer) -> str:
        self._tokens += 1
        return f"{consumer.token_prefix}:{self._tokens}"

    def _paused(self) -> bool:
        return any(consumer.is_paused for consumer in self.consumers)

    def _closing(self) -> bool:
        return any(consumer.is_closing for consumer in self.consumers)


async def open_consumers(
    queues: Sequence[str],
    store: StoreAddress,
    *,
    settings: WorkerSettings,
    attempts: Attempter,
    log: EventLog,
    poll_s: float,
    quiet: Callable[[BaseException], bool] = lambda _error: False,
) -> list[GuardedConsumer]:
    """A BullMQ Worker per queue with this host's lock, stall and poll settings, connected and not running. An
    error `quiet` takes (a full store's refusal, counted there) is not logged on its own."""
    options = {
        "name": settings.worker_name,  # BullMQ stamps it on each job it takes (`pb`) and on its connections
        "concurrency": settings.concurrency,
        "autorun": False,
        "lockDuration": settings.lock_duration_ms,
        "stalledInterval": settings.lock_duration_ms,
        "maxStalledCount": MAX_STALLS,
        "drainDelay": poll_s,
    }
    consumers = []
    for queue in queues:
        connected = {**options, "connection": store.queue_connection()}  # each its own: BullMQ closes it
        bull = GuardedConsumer(queue, _processor(attempts, queue), connected, attempts.failed_unread)
        bull.on("error", functools.partial(_queue_error, quiet, log))
        bull.on("failed", attempts.failed_unrun)
        with contextlib.suppress(*STORE_FAULTS):  # its delays would otherwise fire on whole seconds
            await bounded(bull.warm_up(), 10)
        consumers.append(bull)
    return consumers


def _queue_error(quiet: Callable[[BaseException], bool], log: EventLog, error: BaseException, *_: Any) -> None:
    if not quiet(error):
        log("queue_error", {"reason": type(error).__name__})


def _processor(attempts: Attempter, queue: str) -> Callable[[QueuedJob, str], Awaitable[dict[str, object]]]:
    """The job's processor, of two arguments: BullMQ hands a third (an abort signal) to one that takes three."""

    async def process(job: QueuedJob, token: str) -> dict[str, object]:
        return await attempts.process(job, token, queue)

    return process
