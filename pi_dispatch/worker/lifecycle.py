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
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Final

from redis.exceptions import RedisError

from pi_dispatch.core.errors import ExitStatus
from pi_dispatch.core.keys import SHARED_QUEUE, host_queue_name
from pi_dispatch.fleet.hosts import FleetHost, heartbeat_row
from pi_dispatch.fleet.jobhistory import JobHistory
from pi_dispatch.fleet.liveness import CONSUMER_STUCK_S, IDLE_POLL_S, progress_facts, stuck_consumer
from pi_dispatch.fleet.mirror import RunMirror, mirror_window_ms
from pi_dispatch.fleet.registry import HostRegistry, beating
from pi_dispatch.fleet.rehome import Rehomer
from pi_dispatch.fleet.steal import Stealer
from pi_dispatch.fleet.storereset import EpochWatch
from pi_dispatch.infra.clock import host_zone, wall_ms
from pi_dispatch.infra.events import EventLog, discard
from pi_dispatch.infra.sdnotify import feed_watchdog, notify, watchdog_interval_s
from pi_dispatch.infra.store import PrimaryCheck, StoreAddress, store_of
from pi_dispatch.infra.valkey import bounded, describe
from pi_dispatch.triggers.file import Trigger
from pi_dispatch.triggers.schedules import load_cron
from pi_dispatch.triggers.watch import TriggerWatch
from pi_dispatch.worker.attempts import Attempts
from pi_dispatch.worker.clockwatch import ClockWatch
from pi_dispatch.worker.containers import STOP_GRACE_S, ContainerRuntime
from pi_dispatch.worker.control import Control
from pi_dispatch.worker.cron import CronSchedules
from pi_dispatch.worker.history import RunRecorder, reap_logs
from pi_dispatch.worker.hosthealth import HostHealth
from pi_dispatch.worker.jobdirs import clear_job_dirs
from pi_dispatch.worker.metrics import WorkerMetrics
from pi_dispatch.worker.oneshot import OneShots
from pi_dispatch.worker.output import Outputs
from pi_dispatch.worker.status import StatusLine
from pi_dispatch.worker.storememory import StoreMemoryWatch
from pi_dispatch.worker.waitgate import WaitGate

if TYPE_CHECKING:
    from pi_dispatch.config.worker_settings import WorkerSettings

SWEEP_INTERVAL_S: Final = 24 * 3600
HEALTH_INTERVAL_S: Final = 5.0
# The store or Docker may be away this many lock durations (never less than the floor) before the worker gives
# up and exits 1 for systemd to start it again; by then every job it held has been fenced and put back.
FAULT_BUDGET_LOCKS: Final = 2
FAULT_BUDGET_FLOOR_S: Final = 10.0
TRIGGERS_LABEL: Final = "PI_TRIGGERS_FILE"  # how logs and errors name the file: a name, never its path


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

    def __post_init__(self) -> None:
        self.metrics = WorkerMetrics(enabled=bool(self.settings.metrics_addr))
        self.status = StatusLine()
        self.log = self.status.observe(self.metrics.observe(self.log))
        self.stuck = False
        self.name = self.settings.worker_name
        self.queues = [SHARED_QUEUE] + ([host_queue_name(self.name)] if self.settings.worker_name_declared else [])
        self.bullmq_workers: list[Any] = []
        self.primary: PrimaryCheck | None = None  # a replicated store's check of each take (`_assemble`)

    @property
    def running(self) -> dict[str, Any]:
        return self.attempts.running

    async def run(self, stop: asyncio.Event) -> int:
        settings = self.settings
        boot_text, triggers = await self._read_triggers()
        reaped, digest = await self._prepare_host()
        store = store_of(settings)
        self.client = store.client()
        try:
            await bounded(self.client.ping(), 5)
        except Exception as error:
            return await self._end(f"Valkey is unreachable ({describe(error)})")
        self.clock = ClockWatch(settings.clock_skew_max_ms, self.log, self.now)
        await self.clock.measure(self.client)
        self.now = self.clock.now  # every judgment of time the fleet shares is on the store's clock
        self.metrics.clock(lambda: self.clock.offset_ms)
        self._assemble(store, triggers)
        await self.recorder.recover()  # records an earlier run could not write: kept in the store until written
        await self._start_consumers(store)
        await self.registry.start(self._row(digest or ""))
        watch = await self._start_cron(boot_text)
        await self.control.boot()  # a host drained before this start stays drained: its consumers start paused
        runs = [asyncio.ensure_future(self.pickup.run())]
        rehomer = self.rehomer
        background = [
            asyncio.ensure_future(self._sweep_forever()),
            asyncio.ensure_future(rehomer.run_forever(stop)),
            asyncio.ensure_future(self._upkeep()),
            asyncio.ensure_future(self.control.listen()),
        ]
        health = asyncio.ensure_future(self._health())
        self.log("worker_started", {"queues": self.queues, "concurrency": settings.concurrency, "reaped": reaped})
        notify("READY=1")
        if (interval := watchdog_interval_s()) is not None:
            background.append(asyncio.ensure_future(feed_watchdog(interval)))
        stopping = asyncio.ensure_future(stop.wait())
        done, _ = await asyncio.wait([stopping, health, *runs], return_when=asyncio.FIRST_COMPLETED)
        fault = None
        if stopping not in done:
            fault = health.result() if health in done else "a queue consumer ended"
            self.log("worker_failing", {"reason": fault})
        notify("STOPPING=1")
        for task in (stopping, health, *background):
            task.cancel()
        await self._wind_down(watch, runs, background, rehomer)
        return await self._end(fault)

    def _assemble(self, store: StoreAddress, triggers: list[Trigger] | None) -> None:
        """This worker's parts over its store client: records and their mirror, attempts, the registry, cron."""
        settings = self.settings
        assert self.client is not None
        mirror = (
            RunMirror(self.client, settings.log_retention_days, log=self.log) if settings.worker_name_declared else None
        )
        history = JobHistory(self.client, int(mirror_window_ms(settings.log_retention_days)), self.log)
        self.recorder = RunRecorder(settings.logs_dir, mirror, self.log, attempts=history, host=self.name)
        wait_gate = WaitGate(settings, self.client, self.now, self.jitter, self.log)
        self.attempts = Attempts(settings, self.runtime, self.client, self.recorder, wait_gate, self.now, self.log)
        self.primary = self.attempts.primary = PrimaryCheck(store) if store.replicated else None  # plain: no cost
        self.attempts.metrics = self.metrics
        self.attempts.one_shots = OneShots(settings.triggers_file, self.log)
        self.health = HostHealth(settings.jobs_dir, settings.logs_dir, settings.job_image, self.runtime, self.log)
        self.attempts.health = self.health
        if settings.capture_job_logs:
            store_cap = settings.job_log_store_kb * 1024 if settings.job_log_store else None
            file_cap = settings.job_log_mb * 1024 * 1024
            self.attempts.outputs = Outputs(settings.logs_dir, self.name, file_cap, store_cap, history, self.log)
        self.registry = HostRegistry(self.client, self.name, log=self.log, progress=self._live_facts, now=self.now)
        self.health.changed = self.registry.publish
        self.memory = StoreMemoryWatch(self.log, lambda: self.registry.memory_full_since)
        self.epoch = EpochWatch(self.client, self.now, self.log)
        if self.beat_ms is not None:
            self.registry.beat_ms = self.beat_ms
        self.rehomer = Rehomer(
            self.client, store, settings.rehome_after_ms, settings.lock_duration_ms, self.log, self.now
        )
        self.rehomer.paused = lambda: self.clock.skewed  # silence judged by a clock that far off moves live work
        self.control = Control(
            self.client, self.name, self.attempts, lambda: self.bullmq_workers, self.registry.publish,
            self._move_own_queue, self.now, self.log,
        )  # fmt: skip
        self.cron = CronSchedules(
            self.client,
            store,
            self.queues[-1],  # its own queue when named, else the shared one
            host_zone(settings.tz),
            self.name,
            not settings.worker_name_declared,
            self.registry.publish,
            triggers,
            self.log,
        )
        control = self.control
        self.metrics.start(
            settings.metrics_addr, lambda: len(self.running), settings.concurrency, lambda: control.draining, self.log
        )

    async def _wind_down(
        self,
        watch: TriggerWatch | None,
        runs: Sequence[asyncio.Future[Any]],
        background: Sequence[asyncio.Future[Any]],
        rehomer: Rehomer,
    ) -> None:
        """After the stop: cron and the watch first, then the drain, the consumers, the records, the row last."""
        self.control.close()
        if watch is not None:
            watch.stop()
        await self.cron.close()
        await self._drain()
        for task in runs:
            task.cancel()
        await asyncio.gather(*runs, *background, return_exceptions=True)
        await rehomer.close()
        await self.recorder.settle()
        if self.recorder.unwritten and self.recorder.retry():
            self.log("run_records_unwritten", {"count": len(self.recorder.unwritten)})  # the disk still refuses them
        # A stuck worker's last row (consumer: stuck) stays until its restart replaces it or it ages out, so
        # routers keep leaving this host out meanwhile.
        await self.registry.close(keep_row=self.stuck)

    async def _read_triggers(self) -> tuple[bytes, list[Trigger] | None]:
        """The triggers file's bytes and triggers (None: cron disabled). A file that does not load is a config
        error: the worker exits 2 before it touches anything."""
        if self.settings.triggers_file is None:
            return b"", None
        return await asyncio.to_thread(load_cron, self.settings.triggers_file, TRIGGERS_LABEL)

    async def _prepare_host(self) -> tuple[int, str | None]:
        """Before anything is taken: a dead worker's containers and job folders removed, the job image's id
        read, old logs reaped. Returns how many containers went and the image's id."""
        settings = self.settings
        reaped = await self.runtime.reap()
        await asyncio.to_thread(clear_job_dirs, settings.jobs_dir, self.name)
        digest = await self.runtime.image_id(settings.job_image)
        if digest is None:
            self.log("job_image_missing", {"image": settings.job_image})
        with contextlib.suppress(OSError):
            settings.logs_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        await asyncio.to_thread(reap_logs, settings.logs_dir, settings.log_retention_days, log=self.log)
        return reaped, digest

    async def _start_cron(self, boot_text: bytes) -> TriggerWatch | None:
        """Reconcile the schedulers (refused or failed: tried again each beat), then watch the file."""
        await self.cron.reconcile()
        path = self.settings.triggers_file
        if path is None:
            return None
        watch = TriggerWatch(path, TRIGGERS_LABEL, self.cron.changed, self.log)
        watch.start(boot_text)
        return watch

    async def _end(self, fault: str | None) -> int:
        self.metrics.close()
        if self.primary is not None:
            with contextlib.suppress(RedisError, OSError):
                await self.primary.close()
        with contextlib.suppress(Exception):
            await bounded(self.client.aclose(), 2)
        self.runtime.close()
        if fault is None:
            self.log("worker_stopped", {})
            return ExitStatus.OK
        self.log("worker_stopped", {"reason": fault, "exit": int(ExitStatus.FAILURE)})
        return ExitStatus.FAILURE

    async def _start_consumers(self, store: StoreAddress) -> None:
        """One BullMQ Worker per queue (own first for the pickup), driven by one slot-gated pickup."""
        from pi_dispatch.worker.pickup import Pickup, open_consumers

        settings = self.settings
        self.bullmq_workers = await open_consumers(
            self.queues, store, settings=settings, attempts=self.attempts, log=self.log, poll_s=self.idle_poll_s,
            quiet=self.memory.refusal,
        )  # fmt: skip
        stealer = None
        if settings.worker_name_declared:
            stealer = Stealer(
                self.client,
                self.name,
                settings.steal_after_ms,
                self.attempts.capabilities,
                self.attempts.refuses,
                self.now,
            )
        own_first = list(reversed(self.bullmq_workers))
        self.pickup = Pickup(
            own_first, settings.concurrency, self.idle_poll_s, stealer, settings.steal, self.log, self.metrics
        )
        # no new work while it cannot record, its clock is off, a cause on its side fails jobs, or the store is full
        self.pickup.blocked = lambda: (
            self.recorder.blocked or self.clock.skewed or self.health.unhealthy or self.memory.full
        )

    async def _health(self) -> str:
        """Returns why the worker cannot go on: Docker gone with no job to wait for, or the store gone too long."""
        budget_s = max(FAULT_BUDGET_FLOOR_S, FAULT_BUDGET_LOCKS * self.settings.lock_duration_ms / 1000)
        interval = min(HEALTH_INTERVAL_S, budget_s / 4)
        docker_lost: float | None = None
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            if (stuck := stuck_consumer(self.bullmq_workers, now, self.stuck_after_s)) is not None:
                self.stuck = True  # the row says so at once, so routers leave this host out before it restarts
                await self.registry.publish()
                self.log("consumer_stuck", {"queue": stuck.queue, "seconds": round(stuck.seconds)})
                return stuck.reason
            docker_lost = None if await self.runtime.ping() else (docker_lost or now)
            if docker_lost is not None and now - docker_lost >= budget_s and not self.running:
                return f"the Docker daemon has been unreachable for {now - docker_lost:.0f} s"
            away = self.registry.unreachable_for()
            if away >= budget_s:
                return f"Valkey has been unreachable for {away:.0f} s"

    async def _upkeep(self) -> None:
        """Each beat: write the records the disk refused before, and remove containers nobody waits for (a dead
        worker's, which still hold their job's secrets and could run beside its next attempt)."""
        while True:
            await asyncio.sleep(self.registry.beat_ms / 1000)
            if self.recorder.unwritten and self.recorder.retry():
                self.log("run_records_unwritten", {"count": len(self.recorder.unwritten)})
            self.recorder.remirror()  # the mirrors a full or absent store refused
            await self.memory.check(self.client)
            if self.metrics.enabled:
                last_poll_ms = max((bull.polled_at_ms for bull in self.bullmq_workers), default=0)
                await self.metrics.measure(self.client, self.queues, self.registry.last_beat_ms, last_poll_ms)
            await self.control.beat()
            await self.clock.measure(self.client)
            await self.health.probe()
            if self.health.unhealthy:  # what waits on its own queue goes to peers, as a drain's does
                with contextlib.suppress(Exception):
                    await self._move_own_queue()
            with contextlib.suppress(Exception):  # a store away says nothing of its data; the next beat reads again
                self.cron.pending |= await self.epoch.check()  # the schedulers went with the data: made again below
            down_s = self.registry.unreachable_for()
            self.status.publish(len(self.running), self.settings.concurrency, down_s, self.control.draining)
            await self.cron.retry()
            if self.pickup.stealer is not None:
                with contextlib.suppress(Exception):  # an outage offers nothing; the next beat says it again
                    await self.pickup.stealer.offer()
            # A container of another host's is an orphan when that host's own row says it is not live: asked of the
            # few hosts such containers name, never of the whole registry (a beat's cost stays flat with the fleet).
            confirm = partial(beating, self.client, now_ms=self.now())
            if removed := await self.runtime.sweep_orphans(set(), confirm):
                self.log("orphans_removed", {"count": removed})

    async def _drain(self) -> None:
        """Take nothing new; let running containers finish within the grace, then stop them and put their jobs back."""
        self.attempts.draining.set()
        self.log("worker_draining", {"running": len(self.running)})
        # Pausing stops fetching and waits for the jobs in hand while their locks are still renewed;
        # BullMQ's close() stops renewing them at once, which would hand a long job to a second host.
        pausing = [asyncio.ensure_future(bull.pause()) for bull in self.bullmq_workers]
        _, pending = await asyncio.wait(pausing, timeout=self.settings.drain_grace_ms / 1000) if pausing else ((), ())
        if pending:
            self.log("drain_grace_over", {"running": len(self.running)})
            self.attempts.abort_all()
            _, pending = await asyncio.wait(pending, timeout=STOP_GRACE_S * 3)
        for task in pending:
            task.cancel()
        closing = [asyncio.ensure_future(bull.close()) for bull in self.bullmq_workers]
        if closing:
            _, pending = await asyncio.wait(closing, timeout=STOP_GRACE_S)
            if pending:  # a job's last write still retrying against a store that is gone (BullMQ retries minutes):
                # force it, so no close is left to the loop's shutdown (BullMQ's close spins on a cancelled one)
                forcing = [asyncio.ensure_future(bull.close(force=True)) for bull in self.bullmq_workers]
                _, pending = await asyncio.wait([*pending, *forcing], timeout=STOP_GRACE_S)
                self.log("consumers_forced_closed", {"left": len(pending)})
                for bull in self.bullmq_workers:
                    with contextlib.suppress(RedisError, OSError, TimeoutError):
                        await bounded(bull.drop_connections(), STOP_GRACE_S)

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_INTERVAL_S)
            settings = self.settings
            await asyncio.to_thread(reap_logs, settings.logs_dir, settings.log_retention_days, log=self.log)

    def _live_facts(self) -> dict[str, str]:
        """The row's facts read for every beat: progress (`fleet/liveness.py`) and cron (`fpCron`, `cronCount`)."""
        concurrency = self.settings.concurrency
        held = len(self.pickup.held)
        progress = progress_facts(self.bullmq_workers, self.attempts.running_since, concurrency, self.stuck, held)
        facts = progress | dict(self.cron.row_facts()) | self.control.row_facts() | dict(self.clock.row_facts())
        return facts | dict(self.health.row_facts())

    async def _move_own_queue(self) -> int:
        """A drain's move: what waits on this host's own queue, to live capable peers (a nameless host has none)."""
        if not self.settings.worker_name_declared:
            return 0
        return await self.rehomer.move_waiting(host_queue_name(self.name))

    def _row(self, image_digest: str) -> dict[str, object]:
        settings = self.settings
        return dict(
            heartbeat_row(
                FleetHost.of_settings(settings),
                image=settings.job_image,
                image_digest=image_digest,
                concurrency=settings.concurrency,
                pid=os.getpid(),
                tz=host_zone(settings.tz),
            )
        )
