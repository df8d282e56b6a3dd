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
import re
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from pi_dispatch import __version__
from pi_dispatch.capabilities import capability_tokens, serialize_caps
from pi_dispatch.containers import (
    EXIT_COMPLETED,
    EXIT_POLICY,
    STOP_GRACE_S,
    ContainerEnd,
    ContainerRuntime,
    ContainerSpec,
    DockerUnavailable,
    ImageMissing,
)
from pi_dispatch.events import EventLog, discard
from pi_dispatch.gates import InfraRetry, Refusal, SecretsGate, run_wait_check, usable_script
from pi_dispatch.history import RunRecorder, reap_logs, write_job_log
from pi_dispatch.jscompat import js_json
from pi_dispatch.keys import SHARED_QUEUE, host_queue_name
from pi_dispatch.mirror import RunMirror
from pi_dispatch.names import sanitize_job_id
from pi_dispatch.records import FORGE_KINDS, build_record, target_separator
from pi_dispatch.registry import HostRegistry
from pi_dispatch.settings import WorkerSettings
from pi_dispatch.valkey import bounded, connect, fleet_id, with_password
from pi_dispatch.waits import (
    AFTER_NEAR_MS,
    HoldState,
    WaitBounds,
    WaitConditions,
    WaitDecision,
    after_check,
    after_denied_slot,
    decide_wait,
    parse_after_instant,
    read_conditions,
)

HOLD_KEY: Final = "waitHold"
JOB_DIR_SUFFIX: Final = ".job"
SWEEP_INTERVAL_S: Final = 24 * 3600
LEASE_PREFIX: Final = "wait:check:"
# Variables the worker sets in every job container; a job may not bind a secret over them.
JOB_VARIABLES: Final = ("PI_JOB_ID", "PI_JOB_ATTEMPT", "PI_JOB_KIND", "PI_HOST")
RESERVED_NAMES: Final = frozenset({*JOB_VARIABLES, "PATH", "HOME", "HOSTNAME", "USER", "TERM", "SHELL"})
# Job data the container never sees: secret bindings, wait conditions and our hold state.
PRIVATE_KEYS: Final = frozenset({"secrets", "secretsProfile", "waitFor", HOLD_KEY})
IMAGE_REFERENCE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}")


def iso(epoch_ms: int) -> str:
    """`Date.prototype.toISOString()` of an epoch in ms."""
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def host_zone(configured: str | None) -> str:
    """This host's IANA zone: TZ when set, else the name /etc/localtime links to, else ''."""
    if configured:
        return configured.removeprefix(":")
    with contextlib.suppress(OSError):
        target = str(Path("/etc/localtime").readlink())
        if "zoneinfo/" in target:
            return target.split("zoneinfo/", 1)[1]
    return ""


def wait_target(data: Mapping[str, Any]) -> str | None:
    """The id-only label a wait check is given: `<repo><sep><number>`, or None for a non-forge job."""
    kind, repo, target = data.get("kind"), data.get("repo"), data.get("target")
    if kind not in FORGE_KINDS or not isinstance(repo, str) or not isinstance(target, Mapping):
        return None
    number = target.get("number")
    if not isinstance(number, int) or isinstance(number, bool):
        return None
    return f"{repo}{target_separator(kind, target.get('type'))}{number}"


def write_job_dir(jobs_dir: Path, worker: str, job_id: str, data: Mapping[str, Any]) -> Path:
    """A fresh folder holding the job's event (its trigger, verbatim) and its fields minus secrets and waits.

    Named `<worker>-<job>-<random>.job`, so a jobs dir shared by mistake never mixes two workers' folders.
    """
    jobs_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    prefix = f"{worker}-{sanitize_job_id(job_id)}-"
    folder = Path(tempfile.mkdtemp(dir=jobs_dir, prefix=prefix, suffix=JOB_DIR_SUFFIX))
    folder.chmod(0o755)  # the job image may read it as any user; it holds no secret
    trigger = data.get("trigger")
    event = js_json(trigger if isinstance(trigger, Mapping) else {})
    fields = js_json({key: value for key, value in data.items() if key not in PRIVATE_KEYS})
    for name, text in (("event.json", event), ("job.json", fields)):
        (folder / name).write_text(text + "\n", encoding="utf-8")
        (folder / name).chmod(0o644)
    return folder


def clear_job_dirs(jobs_dir: Path, worker: str) -> int:
    """Remove the job folders a previous run of this worker left behind: its own only, by name."""
    removed = 0
    with contextlib.suppress(OSError):
        for folder in jobs_dir.iterdir():
            ours = folder.name.startswith(f"{worker}-") and folder.name.endswith(JOB_DIR_SUFFIX)
            if ours and folder.is_dir() and not folder.is_symlink():
                shutil.rmtree(folder, ignore_errors=True)
                removed += 1
    return removed


class JobFailure(Exception):
    """A failed attempt: its reason and exit code are recorded; `retry` says whether BullMQ should retry."""

    def __init__(self, reason: str, exit_code: int | None = None, *, retry: bool) -> None:
        self.reason, self.exit_code, self.retry = reason, exit_code, retry
        super().__init__(reason if exit_code is None else f"{reason} (exit {exit_code})")


class PutBack(Exception):
    """The job goes back on its queue untouched: the worker is draining."""


def _result(outcome: str, reason: str | None, exit_code: int | None) -> dict[str, object]:
    return {
        "outcome": outcome,
        "reason": reason,
        "exitCode": exit_code,
        "turns": None,
        "tokens": None,
        "budgetReserved": False,
    }


@dataclass
class Worker:
    """One host's worker. `run` returns when `stop` is set and the drain is over."""

    settings: WorkerSettings
    runtime: ContainerRuntime
    log: EventLog = discard
    now: Callable[[], int] = lambda: time.time_ns() // 1_000_000
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
        self.bounds = WaitBounds(
            self.settings.wait_interval_ms,
            self.settings.wait_max_ms,
            self.settings.wait_max_checks,
            self.settings.wait_max_faults,
        )
        self.running: dict[str, str] = {}  # job id -> image, while its container runs
        self.bullmq_workers: list[Any] = []

    # -- lifecycle ----------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> int:
        from bullmq import Worker as BullWorker

        settings = self.settings
        self.slots = asyncio.Semaphore(settings.concurrency)
        self.check_slots = asyncio.Semaphore(min(settings.wait_check_slots, max(1, settings.concurrency - 1)))
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
        password = settings.valkey_password.get_secret_value() if settings.valkey_password else None
        self.client = connect(settings.valkey_url, password)
        mirror = (
            RunMirror(self.client, settings.log_retention_days, log=self.log) if settings.worker_name_declared else None
        )
        self.recorder = RunRecorder(settings.logs_dir, mirror, self.log)
        registry = HostRegistry(self.client, self.name, log=self.log)
        if self.beat_ms is not None:
            registry.beat_ms = self.beat_ms
        await registry.start(self._facts(digest or ""))
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

    def _facts(self, image_digest: str) -> dict[str, object]:
        settings = self.settings
        return {
            "version": __version__,
            "image": settings.job_image,
            "imageDigest": image_digest,
            "piVersion": "",
            "concurrency": lambda: str(settings.concurrency),
            "pid": os.getpid(),
            "routes": "true" if settings.worker_name_declared else "false",
            "caps": lambda: serialize_caps(capability_tokens(settings.secret_profiles, settings.wait_profiles)),
            "tz": host_zone(settings.tz),
            "fpCron": "",
            "cronCount": "0",
        }

    # -- one job --------------------------------------------------------------------------------------

    def _processor(self, queue: str) -> Callable[[Any, str], Any]:
        async def process(job: Any, token: str) -> dict[str, object]:
            return await self._process(job, token, queue)

        return process

    async def _process(self, job: Any, token: str, queue: str) -> dict[str, object]:
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
            reason = error.reason if isinstance(error, InfraRetry) else "infra"
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
        job: Any,
        data: Mapping[str, Any],
        started: int,
        result: Mapping[str, Any] | None,
        error: Mapping[str, Any] | None,
    ) -> None:
        attempts = job.attemptsMade if isinstance(job.attemptsMade, int) else 0
        record = build_record(
            job_id=str(job.id),
            job_name=job.name if isinstance(job.name, str) else None,
            data=data,
            attempts_made=attempts,
            result=result,
            error=error,
            started_at=iso(started),
            ended_at=iso(self.now()),
            host=self.name,
        )
        self.recorder.record(record)

    async def _attempt(self, job: Any, token: str, data: Mapping[str, Any]) -> dict[str, object]:
        if refused := self.secrets.refusal(data):
            return self._refused(job, refused)
        if data.get("waitFor") is not None and (refused := await self._wait_gate(job, token, data)):
            return self._refused(job, refused)
        async with self._slot():
            secrets = await self.secrets.resolve(data)
            if isinstance(secrets, Refusal):
                return self._refused(job, secrets)
            return await self._run_container(job, data, secrets)

    def _refused(self, job: Any, refusal: Refusal) -> dict[str, object]:
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

    async def _run_container(self, job: Any, data: Mapping[str, Any], secrets: Mapping[str, str]) -> dict[str, object]:
        settings = self.settings
        job_id = str(job.id)
        requested = data.get("image")
        image = settings.job_image if requested is None else requested
        if not isinstance(image, str) or not IMAGE_REFERENCE.fullmatch(image):
            raise JobFailure("job-image-missing", retry=False)
        attempt = job.attemptsMade if isinstance(job.attemptsMade, int) else 0
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
            raise JobFailure("job-image-missing", retry=True) from None
        except DockerUnavailable:
            raise JobFailure("infra", retry=True) from None
        finally:
            self.running.pop(job_id, None)
            await asyncio.to_thread(shutil.rmtree, job_dir, True)
        if settings.capture_job_logs:
            await asyncio.to_thread(write_job_log, settings.logs_dir, job_id, end.output, self.log)
        return self._ending(end)

    def _ending(self, end: ContainerEnd) -> dict[str, object]:
        """The exit-code protocol: 0 completed, 2 policy (returned), 1 or anything else infra (retried)."""
        if end.aborted:
            raise PutBack
        if end.timed_out:
            raise JobFailure("job-timeout", end.exit_code, retry=False)
        if end.exit_code == EXIT_COMPLETED:
            return _result("completed", None, EXIT_COMPLETED)
        if end.exit_code == EXIT_POLICY:
            return _result("policy", "container-policy", EXIT_POLICY)
        raise JobFailure("container-failed", end.exit_code, retry=True)

    # -- the wait gate --------------------------------------------------------------------------------

    def _conditions(self, data: Mapping[str, Any]) -> WaitConditions | Refusal:
        """The job's conditions, or the table-lookup refusal that needs no check: unreadable, unknown, too far."""
        conditions = read_conditions(data.get("waitFor"))
        if conditions is None:
            return Refusal("wait-unreadable")
        for profile in conditions.profiles:
            if profile not in self.settings.wait_profiles:
                return Refusal("wait-profile-unknown", profile)
        if conditions.after is not None:
            instant = parse_after_instant(conditions.after)
            if instant.epoch_ms is None:
                return Refusal("wait-unreadable")
            if instant.epoch_ms - self.now() > self.settings.wait_after_max_ms:
                return Refusal("wait-after-beyond-max")
        return conditions

    async def _wait_gate(self, job: Any, token: str, data: Mapping[str, Any]) -> Refusal | None:
        """Go (None), a refusal, or a hold (the job is moved to delayed and DelayedError raised)."""
        conditions = self._conditions(data)
        if isinstance(conditions, Refusal):
            return conditions
        if conditions.after is not None:
            instant = parse_after_instant(conditions.after).epoch_ms
            if instant is not None and instant - self.now() > AFTER_NEAR_MS:
                await self._hold(job, token, data, None, instant)
        if not conditions.profiles:
            return None
        target = wait_target(data)
        if target is None:
            return Refusal("wait-unreadable")
        state = HoldState.from_data(data.get(HOLD_KEY))
        async with self._check_slot(len(conditions.profiles)) as granted:
            if not granted:
                step = after_denied_slot(state, self.now(), self.bounds, self.jitter())
                if step.reason:
                    return Refusal(step.reason)
                await self._hold(job, token, data, step.state, self.now() + step.delay_ms)
            decision = await self._check_all(conditions.profiles, target)
        if decision.verdict == "go":
            return None
        if decision.aborted:
            await self._hold(job, token, data, state, self.now() + 1_000)
        step = after_check(state, decision, self.now(), self.bounds, self.jitter())
        if step.reason:
            return Refusal(step.reason)
        await self._hold(job, token, data, step.state, self.now() + step.delay_ms)
        return None  # not reached: _hold raises

    async def _check_all(self, profiles: tuple[str, ...], target: str) -> WaitDecision:
        """Each profile's check in writing order, stopping at the first that does not say go."""
        decision = decide_wait(0)
        for profile in profiles:
            script = usable_script(self.settings.wait_profiles[profile])
            if script is None:
                decision = decide_wait(None, failed_to_start=True)
            else:
                decision = await run_wait_check(script, target, self.settings.wait_check_timeout_ms / 1000)
            if decision.verdict != "go":
                return decision
        return decision

    @contextlib.asynccontextmanager
    async def _check_slot(self, profiles: int) -> AsyncIterator[bool]:
        """A local check slot, and with a declared name a fleet lease `wait:check:<i>`; yields whether granted."""
        if self.check_slots.locked():
            yield False
            return
        async with self.check_slots:
            if not self.settings.worker_name_declared:
                yield True
                return
            ttl_s = (profiles + 1) * self.settings.wait_check_timeout_ms / 1000
            lease = await self._lease(ttl_s)
            try:
                yield lease is not None
            finally:
                if lease is not None:
                    with contextlib.suppress(Exception):
                        await bounded(lease.release(), 2)

    async def _lease(self, ttl_s: float) -> Any:
        for index in range(self.settings.wait_check_slots):
            lock = self.client.lock(f"{LEASE_PREFIX}{index}", timeout=ttl_s, blocking=False)
            try:
                if await bounded(lock.acquire(), 2):
                    return lock
            except Exception as error:
                self.log("wait_lease_unreachable", {"reason": type(error).__name__})
                return None
        return None

    async def _hold(
        self, job: Any, token: str, data: Mapping[str, Any], state: HoldState | None, until_ms: int
    ) -> None:
        """Move the job to delayed until until_ms without spending an attempt, keeping its hold state."""
        from bullmq import DelayedError

        if state is not None:
            await job.updateData({**data, HOLD_KEY: state.to_data()})
        await job.moveToDelayed(int(until_ms), token)
        self.log(
            "wait_hold",
            {
                "jobId": str(job.id),
                "delayMs": max(0, int(until_ms) - self.now()),
                "checks": state.checks if state else 0,
            },
        )
        raise DelayedError()


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
