"""The worker's upkeep, once a beat: each step on its own, so one that fails never skips the others.

A step the store fails (away, or refusing) is tried again at the next beat: the registry already says the store is
away. A step that fails otherwise is a bug: logged once (`upkeep_step_failed`, its traceback in a field) until it
passes again (`upkeep_step_restored`), and the beat goes on with the next step.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from pi_dispatch.fleet.registry import HostRegistry, beating
from pi_dispatch.fleet.steal import Stealer
from pi_dispatch.fleet.storereset import EpochWatch
from pi_dispatch.infra.events import EventLog, failure_fields
from pi_dispatch.infra.valkey import STORE_FAULTS
from pi_dispatch.worker.after.history import RunRecorder
from pi_dispatch.worker.gates.limits import Limits
from pi_dispatch.worker.host.clockwatch import ClockWatch
from pi_dispatch.worker.host.control import Control
from pi_dispatch.worker.host.cron import CronSchedules
from pi_dispatch.worker.host.hosthealth import HostHealth
from pi_dispatch.worker.host.status import StatusLine
from pi_dispatch.worker.host.storememory import StoreMemoryWatch
from pi_dispatch.worker.metrics import WorkerMetrics
from pi_dispatch.worker.run.containers import ContainerRuntime

if TYPE_CHECKING:
    import redis.asyncio as aioredis


@dataclass(frozen=True)
class Step:
    name: str
    run: Callable[[], Awaitable[object]]


@dataclass(frozen=True)
class UpkeepParts:
    """What a beat's upkeep reads and asks of the worker's parts."""

    client: aioredis.Redis
    recorder: RunRecorder
    memory: StoreMemoryWatch
    metrics: WorkerMetrics
    registry: HostRegistry
    control: Control
    clock: ClockWatch
    health: HostHealth
    epoch: EpochWatch
    cron: CronSchedules
    status: StatusLine
    runtime: ContainerRuntime
    stealer: Stealer | None
    queues: Sequence[str]
    concurrency: int
    running: Callable[[], int]  # how many jobs run now
    last_poll_ms: Callable[[], int]  # when a consumer last asked its queue for work
    move_own_queue: Callable[[], Awaitable[int]]
    now: Callable[[], int]
    limits: Limits


@dataclass
class Upkeep:
    parts: UpkeepParts
    log: EventLog
    failing: set[str] = field(default_factory=set)  # the steps whose last run failed (logged once)

    @property
    def steps(self) -> tuple[Step, ...]:
        parts = self.parts
        return (
            Step("records", self._records),
            Step("store-memory", partial(parts.memory.check, parts.client)),
            Step("metrics", self._metrics),
            Step("control", parts.control.beat),
            Step("clock", partial(parts.clock.measure, parts.client)),
            Step("host-health", self._health),
            Step("store-epoch", self._epoch),
            Step("status", self._status),
            Step("cron", parts.cron.retry),
            Step("steal-offer", self._offer),
            Step("orphans", self._orphans),
            Step("dollar-holds", self._holds),
        )

    async def run(self) -> None:
        """Forever: a beat's sleep, then every step."""
        while True:
            await asyncio.sleep(self.parts.registry.beat_ms / 1000)
            await self.beat()

    async def beat(self) -> None:
        for step in self.steps:
            await self._step(step)

    async def _step(self, step: Step) -> None:
        try:
            await step.run()
        except STORE_FAULTS:  # the store away or refusing: the registry says so; the next beat tries again
            return
        except Exception as error:  # broad: each step fails alone, and a bug in one never skips the others
            if step.name not in self.failing:
                self.failing.add(step.name)
                self.log("upkeep_step_failed", {"step": step.name, **failure_fields(error)})
            return
        if step.name in self.failing:
            self.failing.discard(step.name)
            self.log("upkeep_step_restored", {"step": step.name})

    async def _records(self) -> None:
        """The records the disk refused before, written again; then the mirrors a full or absent store refused."""
        recorder = self.parts.recorder
        if recorder.unwritten and recorder.retry():
            self.log("run_records_unwritten", {"count": len(recorder.unwritten)})
        recorder.remirror()

    async def _holds(self) -> None:
        """Dollar holds whose worker died before settling them, settled at the floor once their lease ends."""
        await self.parts.limits.sweep_holds()

    async def _metrics(self) -> None:
        parts = self.parts
        if parts.metrics.enabled:
            await parts.metrics.measure(parts.client, parts.queues, parts.registry.last_beat_ms, parts.last_poll_ms())
            parts.metrics.limits(await parts.limits.windows())

    async def _health(self) -> None:
        """The host's own health probed; while it is unhealthy what waits on its own queue goes to peers, as a
        drain's does."""
        await self.parts.health.probe()
        if self.parts.health.unhealthy:
            await self.parts.move_own_queue()

    async def _epoch(self) -> None:
        """A store that lost its data lost the schedulers with it: they are made again by the cron step."""
        self.parts.cron.pending |= await self.parts.epoch.check()

    async def _status(self) -> None:
        parts = self.parts
        down_s = parts.registry.unreachable_for()
        parts.status.publish(parts.running(), parts.concurrency, down_s, parts.control.draining)

    async def _offer(self) -> None:
        if self.parts.stealer is not None:
            await self.parts.stealer.offer()

    async def _orphans(self) -> None:
        """Remove containers nobody waits for (a dead worker's, which still hold their job's secrets and could run
        beside its next attempt). A container of another host's is an orphan when that host's own row says it is not
        live: asked of the few hosts such containers name, never of the whole registry (a beat's cost stays flat)."""
        confirm = partial(beating, self.parts.client, now_ms=self.parts.now())
        if removed := await self.parts.runtime.sweep_orphans(set(), confirm):
            self.log("orphans_removed", {"count": removed})
