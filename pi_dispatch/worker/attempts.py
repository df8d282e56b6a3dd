"""One attempt at one job: the pre-spend gates, the container under a lock fence, the record.

The job's machine slot was taken with the job (`pickup.py`). The gates run in the reference's order (an
undeclared secret profile, then the wait gate, then secret resolution). Refusals are returned, never retried;
infra failures are raised so BullMQ retries them; a held job goes back as a delayed job that spends no attempt.
While the container runs, a `LockFence` proves the job's BullMQ lock: a worker that can no longer prove it kills
the container before the lock can expire, records the attempt as `lock-lost` and never reports it completed.
Every attempt leaves a record file (saying which queue it took the job from, and for a stolen job the queue it
was routed to), then (for a declared name, not awaited) its fleet mirror.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

from redis.exceptions import RedisError

from pi_dispatch.core.capabilities import job_needs
from pi_dispatch.core.egress import PROXY_VARIABLES
from pi_dispatch.core.egressprofiles import EgressPlan
from pi_dispatch.core.exitauth import VERIFIED
from pi_dispatch.core.jobbounds import job_refusal
from pi_dispatch.core.jobs import CONTAINER_VARIABLES, QueuedJob
from pi_dispatch.core.jscompat import iso_string
from pi_dispatch.core.keys import bull_key
from pi_dispatch.core.reasons import Reason
from pi_dispatch.core.runtimes import RuntimeChoice
from pi_dispatch.core.runusage import RunUsage
from pi_dispatch.fleet.control import cancelled_of
from pi_dispatch.infra.events import EventLog
from pi_dispatch.infra.valkey import STORE_FAULTS
from pi_dispatch.worker.after.aftermath import Aftermath
from pi_dispatch.worker.after.history import RunRecorder, attempt_record
from pi_dispatch.worker.after.oneshot import OneShots
from pi_dispatch.worker.gates.jobplace import JobPlace, job_image
from pi_dispatch.worker.gates.limits import Limits
from pi_dispatch.worker.gates.scripts import InfraRetry, Refusal
from pi_dispatch.worker.gates.secrets import SecretsGate
from pi_dispatch.worker.gates.spend import Holds
from pi_dispatch.worker.gates.waitgate import WaitGate
from pi_dispatch.worker.host.hosthealth import HostHealth, unwritable
from pi_dispatch.worker.metrics import WorkerMetrics
from pi_dispatch.worker.prepare.contract import Admitted, JobContract
from pi_dispatch.worker.prepare.jobspec import ContainerSpec, Launch, attempts_made, queue_of
from pi_dispatch.worker.prepare.workspace import Prepared
from pi_dispatch.worker.run.containers import STOP_GRACE_S, ContainerRuntime, StopRequest
from pi_dispatch.worker.run.fencing import LockFence
from pi_dispatch.worker.run.inflight import InFlight
from pi_dispatch.worker.run.outcomes import (
    ContainerEnd,
    DockerUnavailable,
    ImageMissing,
    JobFailure,
    PutBack,
    TakeUnconfirmed,
    container_result,
)
from pi_dispatch.worker.run.output import Outputs, RunningOutput

# What an attempt ended with: its result, or its failure (None: the other)
Ended = Mapping[str, Any] | None

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from pi_dispatch.config.worker_settings import WorkerSettings
    from pi_dispatch.infra.storeprobes import PrimaryCheck
    from pi_dispatch.worker.after.denials import DenialWatch, Refusals
    from pi_dispatch.worker.gates.egressgate import EgressGate, EgressWay


@dataclass
class Attempts:
    """Runs attempts for one worker."""

    settings: WorkerSettings
    runtime: ContainerRuntime
    client: aioredis.Redis
    recorder: RunRecorder
    wait_gate: WaitGate
    now: Callable[[], int]
    log: EventLog
    egress_plan: EgressPlan  # the network each job joins by the profiles it binds
    limits: Limits  # the pause windows, scope slots and windows a start is counted in (`limits.py`)
    inflight: InFlight = field(default_factory=InFlight)  # what cancel and drain act on (`host/control.py`)
    metrics: WorkerMetrics = field(default_factory=lambda: WorkerMetrics(enabled=False))
    one_shots: OneShots | None = None  # spends a one-shot rule once its run's record is written
    outputs: Outputs | None = None  # where attempts' output is kept (None: PI_CAPTURE_JOB_LOGS=0)
    health: HostHealth | None = None  # marked unhealthy by a cause on the host's side (the job is put back)
    primary: PrimaryCheck | None = None  # a replicated store: a take counts once the named primary holds its lock
    egress: EgressGate | None = None  # PI_EGRESS on: a job's one way out is the proxy this gate finds
    runtimes: RuntimeChoice = field(default_factory=RuntimeChoice)  # the runtime each job runs under, once tried
    denials: DenialWatch | None = None  # with egress on: the proxy's refusals, attached to the attempts refused
    refused: dict[str, Refusals] = field(default_factory=dict)  # job id -> its attempt's refusals, until recorded
    contract: JobContract | None = None  # what its containers are given (None: PI_JOB_CONTRACT=event's)
    aftermath: Aftermath = field(default_factory=Aftermath)  # its forge's comment, PI_ON_FAILURE (`aftermath.py`)
    words: dict[str, Mapping[str, str]] = field(default_factory=dict)  # job id -> what its refusal's comment names

    def __post_init__(self) -> None:
        settings = self.settings
        self.name = settings.worker_name
        # nor may a resolver name the proxy (the job's way out is the host's to say), nor what `jobenv` reserves
        reserved = CONTAINER_VARIABLES | set(PROXY_VARIABLES)
        self.secrets = SecretsGate.of(settings, reserved)
        self.place = JobPlace(
            self.secrets, settings.secret_profiles, settings.wait_profiles, self.egress_plan, self.runtimes
        )
        self.capabilities = self.place.capabilities  # what needs a runtime that failed its canary is not served
        self.given = self.contract or JobContract(settings)

    async def process(self, job: QueuedJob, token: str, queue: str) -> dict[str, object]:
        from bullmq import DelayedError, UnrecoverableError

        started = self.now()
        data: Mapping[str, Any] = job.data if isinstance(job.data, Mapping) else {}
        job.opts["stackTraceLimit"] = 0  # a stack trace names our files' paths; Valkey gets names only
        job_id = str(job.id)
        self.inflight.started.add(job_id)
        try:
            result = await self._attempt(job, token, queue, data)
        except DelayedError:  # held by its wait conditions, already moved to delayed
            self.log("job_held", {"jobId": str(job.id), "queue": queue})
            raise
        except TakeUnconfirmed:  # its lock is on a node that is no longer primary: another may hold the job there
            self.log("job_take_unconfirmed", {"jobId": job_id, "queue": queue})
            with contextlib.suppress(TypeError, RedisError):  # BullMQ's lock refusal, or the old node gone
                await job.moveToDelayed(self.now(), token)
            raise DelayedError() from None
        except PutBack:
            await job.moveToDelayed(self.now(), token)
            self.log("job_put_back", {"jobId": str(job.id), "queue": queue})
            raise DelayedError() from None
        except JobFailure as failure:
            failed = {"reason": failure.reason, "exitCode": failure.exit_code, **failure.telemetry}
            self.record(job, data, started, None, failed)
            self.log("job_failed", {"jobId": job_id, "queue": queue, "reason": failure.reason, "retry": failure.retry})
            if failure.retry:
                raise
            raise UnrecoverableError(str(failure)) from None
        except Exception as error:  # broad: the processor's edge; one job's bug never takes the worker down
            reason = error.reason if isinstance(error, InfraRetry) else Reason.INFRA
            self.record(job, data, started, None, {"reason": reason})
            self.log("job_failed", {"jobId": job_id, "queue": queue, "reason": reason, "error": type(error).__name__})
            raise JobFailure(reason, retry=True) from None
        finally:
            self.inflight.started.discard(job_id)
            self.inflight.cancelled.discard(job_id)
        self.record(job, data, started, result, None)
        self.aftermath.ended(job_id, data, result, self.words.pop(job_id, {}))  # its comment, its failure hook
        self.log("job_done", {"jobId": job_id, "queue": queue} | {key: result[key] for key in ("outcome", "reason")})
        return result

    def failed_unread(self, job: Any, reason: Reason) -> None:
        """A job failed unread (its stored data cannot be parsed) still gets a record."""
        self.record(job, {}, self.now(), None, {"reason": reason})
        self.log("job_unreadable", {"jobId": str(job.id), "queue": queue_of(job), "reason": reason})

    def failed_unrun(self, job: Any, error: Any, *_: Any) -> None:
        """A job BullMQ failed without running it (it stalled more than MAX_STALLS times) still gets a record."""
        if getattr(job, "deferredFailure", None):
            data = job.data if isinstance(job.data, dict) else {}
            self.record(job, data, self.now(), None, {"reason": Reason.JOB_STALLED})
            fields = {"jobId": str(job.id), "queue": queue_of(job), "reason": Reason.JOB_STALLED}
            self.log("job_failed", {**fields, "attempt": attempts_made(job)})
        if getattr(job, "finishedOn", None):  # BullMQ's final word on it
            self.aftermath.failed(str(job.id), job.data, str(getattr(job, "failedReason", "") or ""))

    def record(self, job: QueuedJob, data: Mapping[str, Any], started: int, result: Ended, error: Ended) -> None:
        """Record the attempt. Should the job's own fields break the record builder, the attempt is recorded
        without them: a record is never lost to the data it describes."""
        facts: dict[str, Any] = {
            "job_id": str(job.id),
            "job_name": job.name if isinstance(job.name, str) else None,
            "attempts_made": attempts_made(job),
            "started_at": iso_string(started),
            "ended_at": iso_string(self.now()),
            "host": self.name,
        }
        record = attempt_record(facts, data, result, error, self.log)
        record["queue"] = queue_of(job) or None  # where this attempt took the job
        record["routedTo"] = getattr(job, "routed_to", None)  # where the router had put it, when it was stolen
        if (refused := self.refused.pop(facts["job_id"], None)) is not None:
            record["egressRefused"] = refused.as_record()
        self.recorder.record(record)
        if self.one_shots is not None:  # after the record: a crash between leaves it armed with a record, never
            self.one_shots.spend(facts["job_id"], data, self.now())  # spent without one

    async def _attempt(self, job: QueuedJob, token: str, queue: str, data: Mapping[str, Any]) -> dict[str, object]:
        if self.primary is not None and not await self.primary.holds(bull_key(queue, f"{job.id}:lock"), token):
            raise TakeUnconfirmed  # before any gate: nothing is spent on a take the store may not keep
        await self._unless_cancelled(str(job.id), ask_store=True)
        await self.limits.unless_paused(job, token, data)  # a paused job waits: nothing recorded, nothing spent
        if bound := job_refusal(job.data):
            return self._refused(job, Refusal(bound))
        if refused := self.secrets.refusal(data):
            return self._refused(job, refused)
        decided = self.place.decide(data)
        if isinstance(decided, Refusal):
            return self._refused(job, decided)
        network, runtime = decided
        image = self._image(data)
        if isinstance(image, Refusal):
            return self._refused(job, image)
        admitted = self.given.admit(str(job.id), data, await self.runtime.image_facts(image))
        if isinstance(admitted, Refusal):
            return self._refused(job, admitted)
        if data.get("waitFor") is not None:
            with self.metrics.timed_gate("wait_check"):
                refused = await self.wait_gate.admit(job, token, data)
            if refused:
                return self._refused(job, refused)
        self._unless_draining()  # the job's slot was taken with it (`pickup.py`)
        await self._unless_cancelled(str(job.id))
        async with self.limits.scope_slot(job, token, data):  # a busy scope: the job waits, never refused
            return await self._in_slot(job, (token, queue), data, admitted, (image, network, runtime))

    async def _in_slot(
        self,
        job: QueuedJob,
        taken: tuple[str, str],
        data: Mapping[str, Any],
        admitted: Admitted,
        where: tuple[str, str | None, str | None],
    ) -> dict[str, object]:
        """In its scope's slot: its way out, its secrets, its preparation, then the money and the container."""
        (token, queue), (image, network, runtime) = taken, where
        way = await self._egress_way(network)
        with self.metrics.timed_gate("resolver"):
            secrets = await self.secrets.resolve(data)
        if isinstance(secrets, Refusal):
            return self._refused(job, secrets)
        prepared = await self._prepare(job, data, admitted)  # its token, clone and folder: before any money
        if isinstance(prepared, Refusal):
            return self._refused(job, prepared)
        try:
            reservation = await self.limits.reserve(str(job.id), data, admitted.capabilities)
            if isinstance(reservation, Refusal):  # tokens, windows, dollars
                return self._refused(job, reservation)
            fence = LockFence(self.client, queue, str(job.id), token, self.settings.lock_duration_ms)
            launch = Launch(image, secrets, way, network, runtime, reservation.environment, reservation.exit_key)
            try:
                spec = self.given.spec(job, launch, data, prepared, admitted, kept=self.outputs is not None)
                return await self._run_container(job, spec, data, fence, reservation)
            finally:
                if not reservation.started:  # no container ran (its image, Docker): nothing counts
                    await self.limits.unspent(reservation)
        finally:
            await asyncio.to_thread(prepared.remove)

    async def _prepare(self, job: QueuedJob, data: Mapping[str, Any], admitted: Admitted) -> Prepared | Refusal:
        """The job's folders: a jobs dir this host cannot write is the host's fault (the job goes back unspent)."""
        try:
            return await self.given.prepare(str(job.id), data, admitted)
        except OSError as error:
            self._host_fault(unwritable("PI_JOBS_DIR", error))

    def _host_fault(self, reason: str) -> NoReturn:
        """A cause on this host's side: the host is marked unhealthy and the job goes back, its attempt unspent."""
        if self.health is not None:
            self.health.fault(reason)
        raise PutBack

    async def _egress_way(self, network: str | None) -> EgressWay | None:
        """With egress on, the job's way out on its network (none: the host's fault, the job goes back unspent)."""
        way = await self.egress.way_or_fault(network) if self.egress is not None else None
        if isinstance(way, str):
            self._host_fault(way)
        return way

    def _refused(self, job: QueuedJob, refusal: Refusal) -> dict[str, object]:
        self.words[str(job.id)] = refusal.words
        fields: dict[str, object] = {"jobId": str(job.id), "reason": refusal.reason}
        if refusal.profile is not None:
            fields["profile"] = refusal.profile
        self.log("job_refused", fields)
        return refusal.result()

    def _unless_draining(self) -> None:
        """A drain that began while the job was at its gates puts it back before it spends anything more."""
        if self.inflight.draining.is_set():
            raise PutBack

    def refuses(self, data: object) -> bool:
        """Whether this host would refuse the job before spending anything: what a steal never takes."""
        if not isinstance(data, Mapping) or job_refusal(data) or self.secrets.refusal(data):
            return True
        if isinstance(self.place.decide(data), Refusal) or not self.capabilities.issuperset(job_needs(data)):
            return True
        try:
            return isinstance(self._image(data), Refusal)
        except JobFailure:
            return True

    def _image(self, data: Mapping[str, Any]) -> str | Refusal:
        """The job's image (`jobplace.job_image`); one that is no image reference at all fails (job-image-missing)."""
        image = job_image(self.settings.job_image, self.settings.allowed_images, data)
        if image is None:
            raise JobFailure(Reason.JOB_IMAGE_MISSING, retry=False)
        return image

    async def _run_container(
        self, job: QueuedJob, spec: ContainerSpec, data: Mapping[str, Any], fence: LockFence, reservation: Holds
    ) -> dict[str, object]:
        settings, job_id, image = self.settings, str(job.id), spec.image
        stop = StopRequest()
        self.inflight.running[job_id], self.inflight.running_since[job_id] = stop, self.now()
        # a stop asked for before it started stops it now
        if self.inflight.aborting.is_set() or job_id in self.inflight.cancelled:
            stop.request(STOP_GRACE_S)

        def kill_when_fenced(_: asyncio.Future[None]) -> None:
            if fence.lost.is_set():
                stop.request(0)

        watching = asyncio.ensure_future(fence.watch())
        watching.add_done_callback(kill_when_fenced)
        began = time.monotonic()
        output = await self._output(job_id, spec.masked)
        watched = self.denials if spec.resolver is not None else None
        told = watched.started(job_id, str(data.get("secretsProfile") or "")) if watched is not None else None

        async def started(container_id: str) -> None:
            reservation.started = True
            if told is not None:
                await told(container_id)

        try:
            end = await self.runtime.run(spec, output=output.sink if output else None, stop=stop, started=started)
        except ImageMissing:
            if image == settings.job_image:  # the host's own image gone: the host's fault, not the job's
                self._host_fault("PI_JOB_IMAGE is not on this host")
            raise JobFailure(Reason.JOB_IMAGE_MISSING, retry=True) from None
        except DockerUnavailable:
            if not await self.runtime.ping():  # the daemon itself is gone: the host's fault, not the job's
                self._host_fault("the Docker daemon does not answer")
            raise JobFailure(Reason.INFRA, retry=True) from None  # it refused this job's container: retried
        finally:
            watching.cancel()
            await self._after_run(job_id, output, watched)
        return await self._ended(job_id, end, fence, reservation, (began, data.get("flow")))

    async def _ended(
        self, job_id: str, end: ContainerEnd, fence: LockFence, reservation: Holds, run: tuple[float, object]
    ) -> dict[str, object]:
        """The result of a container that ended, with what its exit line says it used, its tokens counted."""
        began, flow = run
        usage = RunUsage.of(end.stdout_tail, reservation.exit_key)  # telemetry: the exit code decides the outcome
        stopped = end.aborted or end.timed_out or fence.lost.is_set() or job_id in self.inflight.cancelled
        # what its dollars may settle to (`spend.py`): only a line signed with the attempt's key is believed
        trusted = not stopped and usage.code == end.exit_code and usage.exit_auth == VERIFIED
        self.metrics.used(flow, usage)
        telemetry = usage.telemetry() | await self.limits.settle(job_id, reservation, usage, trusted=trusted, flow=flow)
        try:
            await self._unless_cancelled(job_id, exit_code=end.exit_code)
            if fence.lost.is_set():  # whatever the container said, another worker may run this job now
                self.log("job_fenced", {"jobId": job_id, "reason": fence.reason})
                raise JobFailure(Reason.LOCK_LOST, end.exit_code, retry=True)
            result = container_result(end)
        except JobFailure as failure:
            failure.telemetry = telemetry
            self.metrics.ran("failed", time.monotonic() - began)
            raise
        self.metrics.ran(str(result["outcome"]), time.monotonic() - began)
        return result | telemetry

    async def _after_run(self, job_id: str, output: RunningOutput | None, watched: DenialWatch | None) -> None:
        """The container is gone: its refusals found, its output closed (its folder is removed with the attempt)."""
        self.inflight.running.pop(job_id, None)
        self.inflight.running_since.pop(job_id, None)
        if watched is not None:
            self.refused[job_id] = await watched.ended(job_id, output.sink if output else None)
        if output is not None:
            await output.finish(iso_string(self.now()))

    async def _output(self, job_id: str, masked: tuple[str, ...]) -> RunningOutput | None:
        """Where this attempt's output goes, every secret and token it was given masked; None when none is kept."""
        if self.outputs is None:
            return None
        return await self.outputs.start(job_id, masked, iso_string(self.now()))

    async def _unless_cancelled(self, job_id: str, *, ask_store: bool = False, exit_code: int | None = None) -> None:
        """End the attempt as `operator-cancel` (never retried) once an operator has cancelled the job. At the start of
        an attempt the store is asked too: a cancel made while the job was elsewhere, or before a restart."""
        if ask_store and job_id not in self.inflight.cancelled:
            with contextlib.suppress(*STORE_FAULTS):  # an unreachable store cancels nothing; the next beat asks again
                if await cancelled_of(self.client, [job_id]):
                    self.inflight.cancelled.add(job_id)
        if job_id in self.inflight.cancelled:
            self.log("job_cancelled", {"jobId": job_id})
            raise JobFailure(Reason.OPERATOR_CANCEL, exit_code, retry=False)
