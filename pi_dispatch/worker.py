"""The worker: drains `pi-jobs` and its own `pi-jobs@<name>`, one container per job.

Each job passes the pre-spend gates in the reference's order (an undeclared secret profile, then the
wait gate, then a machine slot, then secret resolution) before its container starts. Refusals are
returned, never retried; infra failures are raised so BullMQ retries them; a held job goes back as a
delayed job that spends no attempt. Every attempt leaves a record file, then (only for a declared
name, not awaited) its fleet mirror. SIGTERM drains: nothing new is taken, running containers get
PI_DRAIN_GRACE_MS, then they are stopped and their jobs put back for another host.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from pi_dispatch.clock import host_zone, wall_ms
from pi_dispatch.containers import STOP_GRACE_S, ContainerRuntime, ContainerSpec, DockerUnavailable, ImageMissing
from pi_dispatch.events import EventLog, discard
from pi_dispatch.fleet import FleetHost, heartbeat_row
from pi_dispatch.gates import InfraRetry, Refusal, SecretsGate
from pi_dispatch.history import RunRecorder, reap_logs, write_job_log
from pi_dispatch.jobdirs import clear_job_dirs, write_job_dir
from pi_dispatch.jobs import QueuedJob
from pi_dispatch.jscompat import iso_string
from pi_dispatch.keys import SHARED_QUEUE, host_queue_name
from pi_dispatch.mirror import RunMirror
from pi_dispatch.names import IMAGE_REFERENCE_RE
from pi_dispatch.outcomes import JobFailure, PutBack, container_result
from pi_dispatch.reasons import Reason
from pi_dispatch.records import build_record
from pi_dispatch.registry import HostRegistry
from pi_dispatch.settings import WorkerSettings, password_text
from pi_dispatch.valkey import bounded, connect, fleet_id, with_password
from pi_dispatch.waitgate import WaitGate

SWEEP_INTERVAL_S: Final = 24 * 3600
# Variables the worker sets in every job container; a job may not bind a secret over them.
JOB_VARIABLES: Final = ("PI_JOB_ID", "PI_JOB_ATTEMPT", "PI_JOB_KIND", "PI_HOST")
RESERVED_NAMES: Final = frozenset({*JOB_VARIABLES, "PATH", "HOME", "HOSTNAME", "USER", "TERM", "SHELL"})


def _attempts(job: QueuedJob) -> int:
    return job.attemptsMade if isinstance(job.attemptsMade, int) else 0


@dataclass
class Worker:
    """One host's worker. `run` returns when `stop` is set and the drain is over."""

    settings: WorkerSettings
    runtime: ContainerRuntime
    log: EventLog = discard
    now: Callable[[], int] = wall_ms
    jitter: Callable[[], float] = random.random
    beat_ms: int | None = None

    def __post_init__(self) -> None:
        self.name = self.settings.worker_name
        self.queues = [SHARED_QUEUE] + ([host_queue_name(self.name)] if self.settings.worker_name_declared else [])
        self.secrets = SecretsGate(
            self.settings.secret_profiles,
            timeout_s=self.settings.secret_resolve_timeout_ms / 1000,
            reserved=RESERVED_NAMES,
        )
        self.running: dict[str, str] = {}  # job id -> image, while its container runs
        self.bullmq_workers: list[Any] = []

    # -- lifecycle ----------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> int:
        from bullmq import Worker as BullWorker

        settings = self.settings
        self.slots = asyncio.Semaphore(settings.concurrency)
        self.draining = asyncio.Event()
        self.aborting = asyncio.Event()
        reaped = await self.runtime.reap()
        await asyncio.to_thread(clear_job_dirs, settings.jobs_dir, self.name)
        digest = await self.runtime.image_id(settings.job_image)
        if digest is None:
            self.log("job_image_missing", {"image": settings.job_image})
        with contextlib.suppress(OSError):
            settings.logs_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        await asyncio.to_thread(reap_logs, settings.logs_dir, settings.log_retention_days, log=self.log)
        password = password_text(settings)
        self.client = connect(settings.valkey_url, password)
        self.wait_gate = WaitGate(settings, self.client, self.now, self.jitter, self.log)
        mirror = (
            RunMirror(self.client, settings.log_retention_days, log=self.log) if settings.worker_name_declared else None
        )
        self.recorder = RunRecorder(settings.logs_dir, mirror, self.log)
        registry = HostRegistry(self.client, self.name, log=self.log)
        if self.beat_ms is not None:
            registry.beat_ms = self.beat_ms
        await registry.start(self._row(digest or ""))
        connection = with_password(settings.valkey_url, password)
        options = {
            "connection": connection,
            "concurrency": settings.concurrency,
            "autorun": False,
            "lockDuration": settings.lock_duration_ms,
            "stalledInterval": settings.lock_duration_ms,
            "maxStalledCount": 1,
        }
        self.bullmq_workers = [BullWorker(queue, self._processor(queue), dict(options)) for queue in self.queues]
        for bull in self.bullmq_workers:
            bull.on("error", lambda error, *_: self.log("queue_error", {"reason": type(error).__name__}))
            with contextlib.suppress(Exception):  # delays would otherwise fire on whole seconds
                await bounded(bull.blockingRedisConnection.getRedisVersion(), 5)
                await bounded(bull.redisConnection.getRedisVersion(), 5)
        runs = [asyncio.ensure_future(bull.run()) for bull in self.bullmq_workers]
        sweeper = asyncio.ensure_future(self._sweep_forever())
        self.log("worker_started", {"queues": self.queues, "concurrency": settings.concurrency, "reaped": reaped})
        stopping = asyncio.ensure_future(stop.wait())
        await asyncio.wait([stopping, *runs], return_when=asyncio.FIRST_COMPLETED)
        sweeper.cancel()
        await self._drain()
        for task in runs:
            task.cancel()
        await asyncio.gather(*runs, return_exceptions=True)
        await self.recorder.settle()
        await registry.close()
        with contextlib.suppress(Exception):
            await bounded(self.client.aclose(), 2)
        self.runtime.close()
        self.log("worker_stopped", {})
        return 0

    async def _drain(self) -> None:
        """Take nothing new; let running containers finish within the grace, then stop them and put their jobs back."""
        self.draining.set()
        self.log("worker_draining", {"running": len(self.running)})
        # Pausing stops fetching and waits for the jobs in hand while their locks are still renewed;
        # BullMQ's close() stops renewing them at once, which would hand a long job to a second host.
        pausing = [asyncio.ensure_future(bull.pause()) for bull in self.bullmq_workers]
        _, pending = await asyncio.wait(pausing, timeout=self.settings.drain_grace_ms / 1000)
        if pending:
            self.log("drain_grace_over", {"running": len(self.running)})
            self.aborting.set()
            _, pending = await asyncio.wait(pending, timeout=STOP_GRACE_S * 3)
        for task in pending:
            task.cancel()
        closing = [asyncio.ensure_future(bull.close()) for bull in self.bullmq_workers]
        _, pending = await asyncio.wait(closing, timeout=STOP_GRACE_S)
        for task in pending:
            task.cancel()

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_INTERVAL_S)
            settings = self.settings
            await asyncio.to_thread(reap_logs, settings.logs_dir, settings.log_retention_days, log=self.log)

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

    # -- one job --------------------------------------------------------------------------------------

    def _processor(self, queue: str) -> Callable[[QueuedJob, str], Any]:
        async def process(job: QueuedJob, token: str) -> dict[str, object]:
            return await self._process(job, token, queue)

        return process

    async def _process(self, job: QueuedJob, token: str, queue: str) -> dict[str, object]:
        from bullmq import DelayedError, UnrecoverableError

        started = self.now()
        data: Mapping[str, Any] = job.data if isinstance(job.data, Mapping) else {}
        job.opts["stackTraceLimit"] = 0  # a stack trace names our files' paths; Valkey gets names only
        try:
            result = await self._attempt(job, token, data)
        except DelayedError:
            raise
        except PutBack:
            await job.moveToDelayed(self.now(), token)
            raise DelayedError() from None
        except JobFailure as failure:
            self._record(job, data, started, None, {"reason": failure.reason, "exitCode": failure.exit_code})
            self.log(
                "job_failed", {"jobId": str(job.id), "queue": queue, "reason": failure.reason, "retry": failure.retry}
            )
            if failure.retry:
                raise
            raise UnrecoverableError(str(failure)) from None
        except Exception as error:  # never let one job take the worker down; BullMQ retries it
            reason = error.reason if isinstance(error, InfraRetry) else Reason.INFRA
            self._record(job, data, started, None, {"reason": reason})
            self.log(
                "job_failed", {"jobId": str(job.id), "queue": queue, "reason": reason, "error": type(error).__name__}
            )
            raise JobFailure(reason, retry=True) from None
        self._record(job, data, started, result, None)
        self.log(
            "job_done", {"jobId": str(job.id), "queue": queue, "outcome": result["outcome"], "reason": result["reason"]}
        )
        return result

    def _record(
        self,
        job: QueuedJob,
        data: Mapping[str, Any],
        started: int,
        result: Mapping[str, Any] | None,
        error: Mapping[str, Any] | None,
    ) -> None:
        record = build_record(
            job_id=str(job.id),
            job_name=job.name if isinstance(job.name, str) else None,
            data=data,
            attempts_made=_attempts(job),
            result=result,
            error=error,
            started_at=iso_string(started),
            ended_at=iso_string(self.now()),
            host=self.name,
        )
        self.recorder.record(record)

    async def _attempt(self, job: QueuedJob, token: str, data: Mapping[str, Any]) -> dict[str, object]:
        if refused := self.secrets.refusal(data):
            return self._refused(job, refused)
        if data.get("waitFor") is not None and (refused := await self.wait_gate.admit(job, token, data)):
            return self._refused(job, refused)
        async with self._slot():
            secrets = await self.secrets.resolve(data)
            if isinstance(secrets, Refusal):
                return self._refused(job, secrets)
            return await self._run_container(job, data, secrets)

    def _refused(self, job: QueuedJob, refusal: Refusal) -> dict[str, object]:
        fields: dict[str, object] = {"jobId": str(job.id), "reason": refusal.reason}
        if refusal.profile is not None:
            fields["profile"] = refusal.profile
        self.log("job_refused", fields)
        return refusal.result()

    @contextlib.asynccontextmanager
    async def _slot(self) -> AsyncIterator[None]:
        """One of the machine's PI_CONCURRENCY slots, shared by both queues; a drain puts a waiting job back."""
        acquiring = asyncio.ensure_future(self.slots.acquire())
        draining = asyncio.ensure_future(self.draining.wait())
        await asyncio.wait({acquiring, draining}, return_when=asyncio.FIRST_COMPLETED)
        draining.cancel()
        if not acquiring.done() or self.draining.is_set():
            acquiring.cancel()
            if acquiring.done() and not acquiring.cancelled():
                self.slots.release()
            raise PutBack
        try:
            yield
        finally:
            self.slots.release()

    async def _run_container(
        self, job: QueuedJob, data: Mapping[str, Any], secrets: Mapping[str, str]
    ) -> dict[str, object]:
        settings = self.settings
        job_id = str(job.id)
        requested = data.get("image")
        image = settings.job_image if requested is None else requested
        if not isinstance(image, str) or not IMAGE_REFERENCE_RE.fullmatch(image):
            raise JobFailure(Reason.JOB_IMAGE_MISSING, retry=False)
        attempt = _attempts(job)
        job_dir = await asyncio.to_thread(write_job_dir, settings.jobs_dir, self.name, job_id, data)
        spec = ContainerSpec(
            job_id=job_id,
            attempt=attempt,
            image=image,
            job_dir=job_dir,
            environment={
                **secrets,
                "PI_JOB_ID": job_id,
                "PI_JOB_ATTEMPT": str(attempt),
                "PI_JOB_KIND": str(data.get("kind") or job.name or ""),
                "PI_HOST": self.name,
            },
            memory_mb=settings.job_memory_mb,
            cpus=settings.job_cpus,
            timeout_s=settings.job_timeout_ms / 1000,
        )
        self.running[job_id] = image
        try:
            end = await self.runtime.run(spec, capture=settings.capture_job_logs, abort=self.aborting)
        except ImageMissing:
            raise JobFailure(Reason.JOB_IMAGE_MISSING, retry=True) from None
        except DockerUnavailable:
            raise JobFailure(Reason.INFRA, retry=True) from None
        finally:
            self.running.pop(job_id, None)
            await asyncio.to_thread(shutil.rmtree, job_dir, True)
        if settings.capture_job_logs:
            await asyncio.to_thread(write_job_log, settings.logs_dir, job_id, end.output, self.log)
        return container_result(end)


def settings_summary(settings: WorkerSettings) -> dict[str, object]:
    """What the worker logs at boot: names and numbers, never a path or a secret."""
    return {
        "worker": settings.worker_name,
        "declared": settings.worker_name_declared,
        "secretProfiles": sorted(settings.secret_profiles),
        "waitProfiles": sorted(settings.wait_profiles),
        "concurrency": settings.concurrency,
        "image": settings.job_image,
    }


async def serve(settings: WorkerSettings, log: EventLog, stop: asyncio.Event) -> int:
    """Connect to Docker, run the worker until stop is set. Raises DockerUnavailable when Docker is not there."""
    runtime = await asyncio.to_thread(
        ContainerRuntime.connect, settings.worker_name, settings.concurrency, log, fleet_id(settings.valkey_url)
    )
    log("worker_config", settings_summary(settings))
    return await Worker(settings, runtime, log).run(stop)
