"""The operator's hold on this worker: a job cancelled wherever it is, and this host drained or resumed.

The facts are in the store (`fleet/control.py`); a message says "look now" and each beat looks again, so a missed
message costs a beat, never the cancel. A cancelled job that runs here has its container stopped (TERM, the
grace, KILL) and ends as `cancelled`, never retried; one that reaches this worker later is refused before it
spends anything. A drain publishes `draining` in the row at once (routers leave the host out), stops taking jobs
from both queues, moves what waits on its own queue to live capable peers the way re-homing does (a job no live
peer can serve waits for the resume), lets running jobs finish or, past the drain's deadline, stops them and puts
them back. The fact survives a restart: a worker that boots drained starts paused.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from pi_dispatch.core.keys import CONTROL_CHANNEL
from pi_dispatch.fleet.control import Drain, cancelled_of, parse_message, read_drain
from pi_dispatch.infra.events import EventLog, discard
from pi_dispatch.infra.valkey import STORE_FAULTS, StoreUnavailable, describe, outages_named
from pi_dispatch.worker.run.containers import STOP_GRACE_S

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from pi_dispatch.worker.run.inflight import InFlight

RECONNECT_S: Final = 1.0
LISTEN_POLL_S: Final = 1.0


@dataclass
class Control:
    """This worker's side of cancel and drain. `consumers` are its BullMQ workers; `publish` writes its row now;
    `move_own_queue` moves what waits on its own queue to peers (returns how many moved)."""

    client: aioredis.Redis
    name: str
    inflight: InFlight
    consumers: Callable[[], Sequence[Any]]
    publish: Callable[[], Awaitable[object]]
    move_own_queue: Callable[[], Awaitable[int]]
    now: Callable[[], int]
    log: EventLog = discard
    drain: Drain | None = None
    _deadline: asyncio.Future[None] | None = field(default=None, init=False)

    @property
    def draining(self) -> bool:
        return self.drain is not None

    def row_facts(self) -> dict[str, str]:
        return {"draining": "true" if self.draining else ""}

    async def boot(self) -> None:
        """A drain that was in force before this worker started is still in force."""
        with contextlib.suppress(*STORE_FAULTS), outages_named():  # unreadable: the first beat reads it again
            if (drain := await read_drain(self.client, self.name)) is not None:
                await self._drain(drain)

    async def listen(self) -> None:
        """Act on each control message as it comes; a dropped subscription is taken up again a second later. A
        failure that is no outage ends the loop, for its supervisor to log and start again."""
        while True:
            try:
                with outages_named():
                    await self._listen_once()
            except StoreUnavailable as error:
                self.log("control_listen_failed", {"reason": describe(error)})
                await asyncio.sleep(RECONNECT_S)

    async def _listen_once(self) -> None:
        async with self.client.pubsub(ignore_subscribe_messages=True) as pubsub:
            await pubsub.subscribe(CONTROL_CHANNEL)
            while True:
                received = await pubsub.get_message(timeout=LISTEN_POLL_S)
                if received is not None and (parsed := parse_message(received.get("data"))) is not None:
                    await self._act(*parsed)

    async def beat(self) -> None:
        """Each beat: the drain fact and the cancels of the jobs in hand, read again in two round trips."""
        try:
            drain = await read_drain(self.client, self.name)
            cancelled = await cancelled_of(self.client, list(self.inflight.running))
        except STORE_FAULTS as error:
            self.log("control_read_failed", {"reason": describe(error)})
            return
        for job_id in cancelled:
            self.cancel(job_id)
        if drain is None and self.draining:
            await self._resume()
        elif drain is not None:
            await self._drain(drain)

    def cancel(self, job_id: str) -> None:
        """Stop the job's container if it runs here; an attempt still at its gates ends before it starts one."""
        if job_id in self.inflight.cancelled:
            return
        self.inflight.cancelled.add(job_id)
        stop = self.inflight.running.get(job_id)
        if stop is not None:
            stop.request(STOP_GRACE_S)
            self.log("job_cancelling", {"jobId": job_id})

    async def _act(self, kind: str, subject: str) -> None:
        if kind == "cancel":
            if subject in self.inflight.running or subject in self.inflight.started:
                self.cancel(subject)
        elif subject == self.name:
            drain = await read_drain(self.client, self.name)
            await (self._resume() if drain is None else self._drain(drain))

    async def _drain(self, drain: Drain) -> None:
        fresh, earlier = not self.draining, self.drain
        self.drain = drain
        if fresh:
            self.inflight.draining.set()  # a job still at its gates goes back to its queue
            for consumer in self.consumers():
                await consumer.pause(do_not_wait_active=True)
            await self.publish()
            self.log("host_draining", {"running": len(self.inflight.running), "deadline": drain.deadline_ms})
        if fresh or (earlier is not None and earlier.deadline_ms != drain.deadline_ms):
            self._stop_deadline()
            if drain.deadline_ms is not None:
                self._deadline = asyncio.ensure_future(self._stop_at(drain.deadline_ms))
        with contextlib.suppress(*STORE_FAULTS):  # away: the next beat's read of the drain moves them
            if moved := await self.move_own_queue():
                self.log("drain_moved", {"count": moved})

    async def _stop_at(self, deadline_ms: int) -> None:
        """At the drain's deadline the running jobs are stopped (after the grace) and put back, to be moved on."""
        await asyncio.sleep(max(0.0, (deadline_ms - self.now()) / 1000))
        self.log("drain_deadline_passed", {"running": len(self.inflight.running)})
        self.inflight.abort_all()

    def _stop_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    async def _resume(self) -> None:
        self.drain = None
        self._stop_deadline()
        self.inflight.draining.clear()
        self.inflight.aborting.clear()
        for consumer in self.consumers():
            consumer.resume()
        await self.publish()
        self.log("host_resumed", {})

    def close(self) -> None:
        self._stop_deadline()
