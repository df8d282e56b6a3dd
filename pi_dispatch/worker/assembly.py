"""The worker's parts, each given what it needs when it is made: records and their mirror, attempts, the registry,
control, cron, re-homing and the store watches. Nothing is set on a part after it is made (`lifecycle.py` runs them).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pi_dispatch.core.egress import DENIED_LOG, proxy_state_dir
from pi_dispatch.core.egressprofiles import EgressPlan
from pi_dispatch.core.keys import SHARED_QUEUE, host_queue_name
from pi_dispatch.core.runtimes import RuntimeChoice
from pi_dispatch.fleet.jobhistory import JobHistory
from pi_dispatch.fleet.mirror import RunMirror, mirror_window_ms
from pi_dispatch.fleet.registry import HOST_BEAT_MS, HostRegistry
from pi_dispatch.fleet.rehome import Rehomer
from pi_dispatch.fleet.storereset import EpochWatch
from pi_dispatch.infra.clock import host_zone
from pi_dispatch.infra.events import EventLog
from pi_dispatch.infra.store import StoreAddress
from pi_dispatch.worker.after.aftermath import Aftermath, FailureHook
from pi_dispatch.worker.after.history import RunRecorder
from pi_dispatch.worker.after.oneshot import OneShots
from pi_dispatch.worker.attempts import Attempts
from pi_dispatch.worker.gates.agentgate import AgentGate
from pi_dispatch.worker.gates.limits import LimitFiles, Limits, read_limit_files
from pi_dispatch.worker.gates.waitgate import WaitGate
from pi_dispatch.worker.host.clockwatch import ClockWatch
from pi_dispatch.worker.host.control import Control
from pi_dispatch.worker.host.cron import CronSchedules
from pi_dispatch.worker.host.hosthealth import HostHealth
from pi_dispatch.worker.host.storememory import StoreMemoryWatch
from pi_dispatch.worker.metrics import WorkerMetrics
from pi_dispatch.worker.prepare.contract import REFERENCE_CONTRACT, JobContract
from pi_dispatch.worker.prepare.jobdirs import worker_jobs_dir
from pi_dispatch.worker.prepare.workspace import Preparer
from pi_dispatch.worker.run.containers import ContainerRuntime
from pi_dispatch.worker.run.output import Outputs

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from pi_dispatch.config.worker_settings import WorkerSettings
    from pi_dispatch.infra.storeprobes import PrimaryCheck
    from pi_dispatch.triggers.file import Trigger


@dataclass(frozen=True)
class Hooks:
    """What the parts ask of the worker that holds them, read when asked (the consumers open after the parts)."""

    consumers: Callable[[], list[Any]]  # its BullMQ workers
    live_facts: Callable[[], Mapping[str, str]]  # the row's facts read for every beat
    move_own_queue: Callable[[], Awaitable[int]]  # what waits on its own queue, to peers


@dataclass(frozen=True)
class Parts:
    """One worker's parts over its store client."""

    client: aioredis.Redis
    store: StoreAddress
    clock: ClockWatch
    recorder: RunRecorder
    attempts: Attempts
    health: HostHealth
    registry: HostRegistry
    memory: StoreMemoryWatch
    epoch: EpochWatch
    rehomer: Rehomer
    control: Control
    cron: CronSchedules
    primary: PrimaryCheck | None  # a replicated store's check of each take; a plain store pays nothing


def assemble(
    settings: WorkerSettings,
    runtime: ContainerRuntime,
    connection: tuple[StoreAddress, aioredis.Redis, ClockWatch],
    *,
    triggers: list[Trigger] | None,
    metrics: WorkerMetrics,
    log: EventLog,
    hooks: Hooks,
    jitter: Callable[[], float],
    beat_ms: int | None = None,
    egress_plan: EgressPlan | None = None,
    runtimes: tuple[RuntimeChoice, str | None] = (RuntimeChoice(), None),
    limit_files: LimitFiles | None = None,
) -> Parts:
    """The parts, each made with what it needs."""
    store, client, clock = connection
    name = settings.worker_name
    now = clock.now  # every judgment of time the fleet shares is on the store's clock
    mirror = RunMirror(client, settings.log_retention_days, log=log) if settings.worker_name_declared else None
    history = JobHistory(client, int(mirror_window_ms(settings.log_retention_days)), log)
    recorder = RunRecorder(settings.logs_dir, mirror, log, attempts=history, host=name)
    registry = HostRegistry(client, name, log=log, progress=hooks.live_facts, now=now, beat_ms=beat_ms or HOST_BEAT_MS)
    egress = denials = None
    plan = egress_plan or EgressPlan(settings.jobs_network)  # without profile lists: PI_JOB_NETWORK for every job
    if settings.egress_network is not None:  # its parts loaded with egress on only: a worker without keeps none
        from pi_dispatch.worker.after.denials import DenialLog, DenialWatch
        from pi_dispatch.worker.gates.egressgate import RESOLVER_FILE, EgressGate

        resolver = worker_jobs_dir(settings.jobs_dir, name) / RESOLVER_FILE
        egress = EgressGate(runtime.client, plan.network_names(), resolver)
        refusal_log = DenialLog(proxy_state_dir(settings.egress_state_dir) / DENIED_LOG)
        refusal_log.start()  # what it holds already is no running job's
        denials = DenialWatch(refusal_log, egress.address, log=log)
    choice, runtime_fault = runtimes  # as the boot canary found them (`canary.py`)
    health = HostHealth(
        settings.jobs_dir,
        settings.logs_dir,
        settings.job_image,
        runtime,
        log,
        changed=registry.publish,
        egress=egress,
        runtime_fault=runtime_fault,
    )
    outputs = None
    if settings.capture_job_logs:
        store_cap = settings.job_log_store_kb * 1024 if settings.job_log_store else None
        outputs = Outputs(settings.logs_dir, name, settings.job_log_mb * 1024 * 1024, store_cap, history, log)
    primary = None
    if store.replicated:  # the Sentinels' probes loaded for a replicated store only
        from pi_dispatch.infra.storeprobes import PrimaryCheck

        primary = PrimaryCheck(store)
    limits = Limits(settings, client, now, log, *(limit_files or read_limit_files(settings)))
    contract, comments = JobContract(settings), None
    hook = None
    if settings.on_failure is not None:
        hook = FailureHook(settings.on_failure, settings.on_failure_timeout_ms / 1000, name, log)
    if settings.job_contract == REFERENCE_CONTRACT:  # its forges' clients loaded for the reference's contract only
        from pi_dispatch.forgeapi.http import ForgeClient
        from pi_dispatch.forgeapi.jobforge import job_forges
        from pi_dispatch.infra.dockerclient import security_options

        forges = job_forges(settings, ForgeClient(ca_file=settings.ssl_cert_file), log)
        from pi_dispatch.worker.after.forgecomments import ForgeComments

        preparer = Preparer(settings.jobs_dir, name, forges, log, settings.ssl_cert_file)
        words = {"image": settings.job_image, "provider": settings.provider}
        gate = AgentGate(settings, log, security_options(runtime.client))
        contract = JobContract(settings, gate, preparer)
        comments = ForgeComments(forges, log, words)
    attempts = Attempts(
        settings,
        runtime,
        client,
        recorder,
        WaitGate(settings, client, now, jitter, log),
        now,
        log,
        plan,
        limits,
        metrics=metrics,
        one_shots=OneShots(settings.triggers_file, log),
        outputs=outputs,
        health=health,
        primary=primary,
        egress=egress,
        runtimes=choice,
        denials=denials,
        contract=contract,
        aftermath=Aftermath(comments, hook),
    )
    rehomer = Rehomer(
        client,
        store,
        settings.rehome_after_ms,
        settings.lock_duration_ms,
        log,
        now,
        paused=lambda: clock.skewed,  # silence judged by a clock that far off moves live work
    )
    control = Control(
        client, name, attempts.inflight, hooks.consumers, registry.publish, hooks.move_own_queue, now, log
    )
    cron = CronSchedules(  # on its own queue when named, else on the shared one
        client,
        store,
        worker_queues(settings)[-1],
        host_zone(settings.tz),
        name,
        not settings.worker_name_declared,
        registry.publish,
        triggers,
        log,
    )
    memory = StoreMemoryWatch(log, lambda: registry.memory_full_since)
    epoch = EpochWatch(client, now, log)
    return Parts(
        client, store, clock, recorder, attempts, health, registry, memory, epoch, rehomer, control, cron, primary
    )


def worker_queues(settings: WorkerSettings) -> list[str]:
    """The queues a worker drains: the shared one, then its own when it is named (`pi-jobs@<name>`)."""
    return [SHARED_QUEUE] + ([host_queue_name(settings.worker_name)] if settings.worker_name_declared else [])
