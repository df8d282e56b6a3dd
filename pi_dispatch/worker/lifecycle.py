"""The worker's lifecycle: drains `pi-jobs` and its own `pi-jobs@<name>`, one container per job, until told to stop.

It beats its registry row, re-homes the queues of named hosts that stay silent (`fleet/rehome.py`), keeps its cron
schedulers equal to its triggers file (`cron.py`), and watches its own health. SIGTERM drains: nothing new is
taken, running containers get PI_DRAIN_GRACE_MS, then they are stopped and their jobs put back for another
host; the exit is 0. A queue consumer that ends, a store that
stays unreachable past its budget, or a Docker daemon gone while no job runs, end the worker with exit 1 and a
one-line reason, so systemd starts it again; exit 2 is only ever a configuration error. What one attempt does
is `attempts.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError

from pi_dispatch.core.egressprofiles import EgressPlan
from pi_dispatch.core.errors import ExitStatus
from pi_dispatch.core.keys import host_queue_name
from pi_dispatch.fleet.hosts import FleetHost, heartbeat_row
from pi_dispatch.fleet.liveness import CONSUMER_STUCK_S, IDLE_POLL_S, progress_facts
from pi_dispatch.fleet.rehome import Rehomer
from pi_dispatch.fleet.steal import Stealer
from pi_dispatch.infra.clock import host_zone, wall_ms
from pi_dispatch.infra.events import EventLog, discard
from pi_dispatch.infra.sdnotify import feed_watchdog, notify, watchdog_interval_s
from pi_dispatch.infra.store import store_of
from pi_dispatch.infra.supervise import Loop, OnFailure, ProcessFault, Supervisor
from pi_dispatch.infra.valkey import STORE_FAULTS, bounded, describe
from pi_dispatch.worker.after.history import RunRecorder
from pi_dispatch.worker.assembly import Hooks, Parts, assemble, worker_queues
from pi_dispatch.worker.attempts import Attempts
from pi_dispatch.worker.gates.limits import LimitFiles
from pi_dispatch.worker.host.boot import TRIGGERS_LABEL, prepare_host, read_triggers, sweep_logs_forever
from pi_dispatch.worker.host.canary import boot_runtimes
from pi_dispatch.worker.host.clockwatch import ClockWatch
from pi_dispatch.worker.host.cron import CronSchedules
from pi_dispatch.worker.host.faults import FaultWatch, fault_budget_s, watch_faults
from pi_dispatch.worker.host.status import StatusLine
from pi_dispatch.worker.host.upkeep import Upkeep, UpkeepParts
from pi_dispatch.worker.metrics import WorkerMetrics
from pi_dispatch.worker.run.containers import STOP_GRACE_S, ContainerRuntime
from pi_dispatch.worker.take.drain import drain_consumers

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from pi_dispatch.config.worker_settings import WorkerSettings
    from pi_dispatch.triggers.watch import TriggerWatch
    from pi_dispatch.worker.take.pickup import Pickup


@dataclass
class Worker:
    """One host's worker. `run` returns the exit status: 0 once `stop` is set and the drain is over, 1 on a fault."""

    settings: WorkerSettings
    runtime: ContainerRuntime
    log: EventLog = discard
    now: Callable[[], int] = wall_ms
    jitter: Callable[[], float] = random.random
    beat_ms: int | None = None
    stuck_after_s: float = CONSUMER_STUCK_S
    idle_poll_s: float = IDLE_POLL_S
    egress_plan: EgressPlan | None = None  # the network each job joins by its profiles (None: PI_JOB_NETWORK's)
    limit_files: LimitFiles | None = None  # the scoped limits and pause windows as read at boot (None: read here)
    metrics: WorkerMetrics = field(init=False)
    status: StatusLine = field(default_factory=StatusLine, init=False)
    stuck: bool = field(default=False, init=False)
    bullmq_workers: list[Any] = field(default_factory=list, init=False)
    parts: Parts | None = field(default=None, init=False)  # made once the store answers (`assembly.py`)
    pickup: Pickup | None = field(default=None, init=False)  # made once the consumers are open

    def __post_init__(self) -> None:
        self.metrics = WorkerMetrics(enabled=bool(self.settings.metrics_addr))
        self.log = self.status.observe(self.metrics.observe(self.log))

    @property
    def name(self) -> str:
        return self.settings.worker_name

    @property
    def queues(self) -> list[str]:
        """The shared queue, then its own when it is named (`pi-jobs@<name>`)."""
        return worker_queues(self.settings)

    @property
    def made(self) -> Parts:
        assert self.parts is not None, "the worker's parts are made in run()"
        return self.parts

    @property
    def attempts(self) -> Attempts:
        return self.made.attempts

    @property
    def recorder(self) -> RunRecorder:
        return self.made.recorder

    @property
    def cron(self) -> CronSchedules:
        return self.made.cron

    @property
    def rehomer(self) -> Rehomer:
        return self.made.rehomer

    @property
    def running(self) -> dict[str, Any]:
        return self.attempts.inflight.running

    async def run(self, stop: asyncio.Event) -> int:
        settings = self.settings
        boot_text, triggers = await read_triggers(settings)
        reaped, digest = await prepare_host(self.runtime, settings, self.log)
        runtimes = await boot_runtimes(self.runtime, settings, self.log)  # each tried before any job is taken
        store = store_of(settings)
        client = store.client()
        try:
            await bounded(client.ping(), 5)
        except STORE_FAULTS as error:
            return await self._end(client, f"Valkey is unreachable ({describe(error)})")
        clock = ClockWatch(settings.clock_skew_max_ms, self.log, self.now)
        await clock.measure(client)
        self.metrics.clock(lambda: clock.offset_ms)
        hooks = Hooks(lambda: self.bullmq_workers, self._live_facts, self._move_own_queue)
        parts = self.parts = assemble(
            settings,
            self.runtime,
            (store, client, clock),
            triggers=triggers,
            metrics=self.metrics,
            log=self.log,
            hooks=hooks,
            jitter=self.jitter,
            beat_ms=self.beat_ms,
            egress_plan=self.egress_plan,
            runtimes=runtimes,
            limit_files=self.limit_files,
        )
        await parts.attempts.limits.sweep_claims(reaped=True)  # the reap above listed this host's containers
        parts.attempts.limits.watch()
        self.metrics.start(
            settings.metrics_addr,
            lambda: len(self.running),
            settings.concurrency,
            lambda: parts.control.draining,
            self.log,
        )
        await parts.recorder.recover()  # records an earlier run could not write: kept in the store until written
        if parts.health.egress is not None and (down := await parts.health.egress.fault()) is not None:
            parts.health.fault(down)  # its first row says so: no job is taken only to go back
        if parts.health.runtime_fault is not None:
            parts.health.fault(parts.health.runtime_fault)
        pickup = await self._start_consumers(parts)
        await parts.registry.start(self._row(digest or ""), keep_beating=False)  # the supervisor keeps it beating
        watch = await self._start_cron(boot_text)
        await parts.control.boot()  # a host drained before this start stays drained: its consumers start paused
        supervisor = Supervisor(self.log)
        supervisor.start(*self._loops(parts, pickup, stop))
        self.log("worker_started", {"queues": self.queues, "concurrency": settings.concurrency, "reaped": reaped})
        notify("READY=1")
        if (fault := await supervisor.until_stopped(stop)) is not None:
            self.log("worker_failing", {"reason": fault})
        notify("STOPPING=1")
        await self._wind_down(watch, supervisor)
        return await self._end(client, fault)

    def _loops(self, parts: Parts, pickup: Pickup, stop: asyncio.Event) -> list[Loop]:
        """Every long-running loop of the worker, each with what its failure means and why."""

        async def consume() -> None:
            await pickup.run()
            raise ProcessFault("a queue consumer ended")

        loops = [
            Loop("consumers", consume, OnFailure.STOP, "a worker that takes no jobs must not beat as if it did"),
            Loop("health", self._health, OnFailure.STOP, "it is what notices the store or Docker gone for good"),
            Loop("beat", parts.registry.beat_forever, OnFailure.STOP, "a host that cannot beat is routed nothing"),
            Loop(
                "upkeep",
                Upkeep(self._upkeep_parts(parts, pickup), self.log).run,
                OnFailure.RESTART,
                "each beat stands alone: the next one reads everything again",
            ),
            Loop(
                "rehome",
                partial(parts.rehomer.run_forever, stop),
                OnFailure.RESTART,
                "each sweep stands alone, under a lease with a TTL",
            ),
            Loop(
                "control",
                parts.control.listen,
                OnFailure.RESTART,
                "a fresh subscription; the beat reads cancels and drains meanwhile",
            ),
            Loop(
                "log-sweep",
                partial(sweep_logs_forever, self.settings, self.log),
                OnFailure.RESTART,
                "the next day's sweep reads the folder again",
            ),
        ]
        if parts.store.replicated:  # a plain store has no primary to leave: its watch is not even loaded
            from pi_dispatch.infra.primarywatch import primary_watch_loops

            loops += primary_watch_loops(parts.store, self.log)
        if (interval := watchdog_interval_s()) is not None:
            feed = partial(feed_watchdog, interval)
            loops.append(Loop("watchdog", feed, OnFailure.STOP, "unfed, systemd kills the worker without a drain"))
        return loops

    def _upkeep_parts(self, parts: Parts, pickup: Pickup) -> UpkeepParts:
        return UpkeepParts(
            client=parts.client,
            recorder=parts.recorder,
            memory=parts.memory,
            metrics=self.metrics,
            registry=parts.registry,
            control=parts.control,
            clock=parts.clock,
            health=parts.health,
            epoch=parts.epoch,
            cron=parts.cron,
            status=self.status,
            runtime=self.runtime,
            stealer=pickup.stealer,
            queues=self.queues,
            concurrency=self.settings.concurrency,
            running=lambda: len(self.running),
            last_poll_ms=lambda: max((bull.polled_at_ms for bull in self.bullmq_workers), default=0),
            move_own_queue=self._move_own_queue,
            now=parts.clock.now,
            limits=parts.attempts.limits,
        )

    async def _wind_down(self, watch: TriggerWatch | None, supervisor: Supervisor) -> None:
        """After the stop: the loops but the consumers' and the beat's, cron and the watch, then the drain, the
        consumers, the records, the row last."""
        parts = self.made
        await supervisor.close(keep=("consumers", "beat"))  # the row says what the host does until it is gone
        parts.control.close()
        if watch is not None:
            watch.stop()
        parts.attempts.limits.stop()
        await parts.cron.close()
        await self._drain()
        await supervisor.close()
        for bull in self.bullmq_workers:  # the pickup has ended: no command can reopen them now
            with contextlib.suppress(*STORE_FAULTS):
                await bounded(bull.drop_connections(), STOP_GRACE_S)
        await parts.rehomer.close()
        await parts.recorder.settle()
        if parts.recorder.unwritten and parts.recorder.retry():
            self.log("run_records_unwritten", {"count": len(parts.recorder.unwritten)})  # the disk still refuses them
        # A stuck worker's last row (consumer: stuck) stays until its restart replaces it or it ages out, so
        # routers keep leaving this host out meanwhile.
        await parts.registry.close(keep_row=self.stuck)

    async def _start_cron(self, boot_text: bytes) -> TriggerWatch | None:
        """Reconcile the schedulers (refused or failed: tried again each beat), then watch the file."""
        await self.cron.reconcile()
        path = self.settings.triggers_file
        if path is None:
            return None
        from pi_dispatch.triggers.watch import TriggerWatch  # with a file only

        watch = TriggerWatch(path, TRIGGERS_LABEL, self.cron.changed, self.log)
        watch.start(boot_text)
        return watch

    async def _end(self, client: aioredis.Redis, fault: str | None) -> int:
        self.metrics.close()
        if self.parts is not None and self.parts.primary is not None:
            with contextlib.suppress(RedisError, OSError):  # the Sentinels' own clients
                await self.parts.primary.close()
        with contextlib.suppress(*STORE_FAULTS):
            await bounded(client.aclose(), 2)
        if self.parts is not None:  # what it still posts to its forges and its hook runs, then the forges' client
            await self.parts.attempts.aftermath.close()
            await self.parts.attempts.given.close()
        self.runtime.close()
        if fault is None:
            self.log("worker_stopped", {})
            return ExitStatus.OK
        self.log("worker_stopped", {"reason": fault, "exit": int(ExitStatus.FAILURE)})
        return ExitStatus.FAILURE

    async def _start_consumers(self, parts: Parts) -> Pickup:
        """One BullMQ Worker per queue (own first for the pickup), driven by one slot-gated pickup."""
        from pi_dispatch.worker.take.pickup import Pickup, open_consumers

        settings, attempts = self.settings, parts.attempts
        self.bullmq_workers = await open_consumers(
            self.queues,
            parts.store,
            settings=settings,
            attempts=attempts,
            log=self.log,
            poll_s=self.idle_poll_s,
            quiet=parts.memory.refusal,
        )
        stealer = None
        if settings.worker_name_declared:
            stealer = Stealer(
                parts.client,
                self.name,
                settings.steal_after_ms,
                attempts.capabilities,
                attempts.refuses,
                parts.clock.now,
            )

        def blocked() -> bool:  # no new work while it cannot record, its clock is off, a cause on its side fails
            # jobs, or the store is full
            return parts.recorder.blocked or parts.clock.skewed or parts.health.unhealthy or parts.memory.full

        self.pickup = Pickup(
            list(reversed(self.bullmq_workers)),
            settings.concurrency,
            self.idle_poll_s,
            stealer,
            settings.steal,
            self.log,
            self.metrics,
            blocked=blocked,
        )
        return self.pickup

    async def _health(self) -> None:
        """Raises ProcessFault with why the worker cannot go on (`host/faults.py`)."""
        budget_s = fault_budget_s(self.settings.lock_duration_ms)

        def stuck() -> None:  # the row says so at once, so routers leave this host out before it restarts
            self.stuck = True

        await watch_faults(
            FaultWatch(self.made.registry, self.runtime, lambda: self.bullmq_workers, lambda: bool(self.running)),
            budget_s,
            self.stuck_after_s,
            stuck,
            self.log,
        )

    async def _drain(self) -> None:
        """Take nothing new; let running containers finish within the grace, then stop them and put their jobs back."""
        inflight = self.attempts.inflight
        inflight.draining.set()
        self.log("worker_draining", {"running": len(self.running)})
        grace_s = self.settings.drain_grace_ms / 1000
        await drain_consumers(
            self.bullmq_workers,
            grace_s,
            stop_grace_s=STOP_GRACE_S,
            abort_all=inflight.abort_all,
            running=lambda: len(self.running),
            log=self.log,
        )

    def _live_facts(self) -> dict[str, str]:
        """The row's facts read for every beat: progress (`fleet/liveness.py`) and cron (`fpCron`, `cronCount`)."""
        parts, concurrency = self.made, self.settings.concurrency
        held = len(self.pickup.held) if self.pickup is not None else 0
        progress = progress_facts(
            self.bullmq_workers, parts.attempts.inflight.running_since, concurrency, self.stuck, held
        )
        facts = progress | dict(parts.cron.row_facts()) | parts.control.row_facts() | dict(parts.clock.row_facts())
        return facts | dict(parts.health.row_facts()) | parts.attempts.limits.row_facts()

    async def _move_own_queue(self) -> int:
        """A drain's move: what waits on this host's own queue, to live capable peers (a nameless host has none)."""
        if not self.settings.worker_name_declared:
            return 0
        return await self.rehomer.move_waiting(host_queue_name(self.name))

    def _row(self, image_digest: str) -> dict[str, object]:
        settings = self.settings
        attempts = self.attempts
        return dict(
            heartbeat_row(
                replace(FleetHost.of_settings(settings), tokens=attempts.capabilities),  # less what it cannot run
                runtimes=attempts.runtimes.working,
                image=settings.job_image,
                image_digest=image_digest,
                concurrency=settings.concurrency,
                pid=os.getpid(),
                tz=host_zone(settings.tz),
            )
        )
