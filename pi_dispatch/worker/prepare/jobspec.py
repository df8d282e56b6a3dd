"""A job's container, as its attempt makes it once the gates have passed: the image, the secrets the resolver gave,
the job's own variables, this host's limits, and with egress on its one way out (`egressgate.py`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from pi_dispatch.core.jobs import QueuedJob

if TYPE_CHECKING:
    from pi_dispatch.config.worker_settings import WorkerSettings
    from pi_dispatch.worker.gates.egressgate import EgressWay


def queue_of(job: Any) -> str:
    """The queue a job was taken from (BullMQ keeps its Worker on the job; the Worker is named after its queue)."""
    name = getattr(getattr(job, "queue", None), "name", None)
    return name if isinstance(name, str) else ""


def attempts_made(job: QueuedJob) -> int:
    return job.attemptsMade if isinstance(job.attemptsMade, int) else 0


@dataclass(frozen=True)
class ContainerSpec:
    """Everything one job's container is made from."""

    job_id: str
    attempt: int
    image: str
    job_dir: Path
    environment: Mapping[str, str]
    memory_mb: int
    cpus: float
    timeout_s: float
    network: str | None = None  # the daemon's default when None
    user: str | None = None  # the image's own user when None
    read_only: bool = False
    log_mb: int = 10
    docker_log: bool = True  # False when the worker keeps the output itself: Docker then keeps no second copy
    resolver: Path | None = None  # a file to be the job's /etc/resolv.conf (egress: one naming no resolver)
    runtime: str | None = None  # the OCI runtime (runsc: gVisor); the daemon's default when None
    stdin_key: str | None = field(default=None, repr=False)  # written on its stdin, then closed (`core/exitauth.py`)
    mounts: Mapping[str, tuple[Path, str]] = field(default_factory=dict)  # beside /job: where -> (what, ro or rw)
    shm_mb: int | None = None  # /dev/shm's size (None: the daemon's)
    masked: tuple[str, ...] = field(default=(), repr=False)  # what its output may never show: secrets, its token


@dataclass(frozen=True)
class ImageFacts:
    """What a job's image says of itself: its labels (what it declares it can do), its user (empty: root)."""

    labels: dict[str, str]
    user: str


@dataclass(frozen=True)
class Launch:
    """What a job's container is made with once its gates have passed."""

    image: str
    secrets: Mapping[str, str]
    way: EgressWay | None  # with egress on, its one way out
    network: str | None  # the Docker network it joins (None: the daemon's default; `none`: no network)
    runtime: str | None = None  # the OCI runtime it runs under (None: the daemon's default)
    spend: Mapping[str, str] = field(default_factory=dict)  # its cost cap and exit-line channel (`spend.py`)
    exit_key: str | None = field(default=None, repr=False)  # the key its exit line is signed with, on its stdin


def container_spec(
    settings: WorkerSettings, job: QueuedJob, launch: Launch, data: Mapping[str, Any], job_dir: Path, *, kept: bool
) -> ContainerSpec:
    """The job's container: its secrets and the job's own variables as env, this host's limits, and with egress on
    the proxy as its one way out. `kept`: the worker keeps the output, so Docker need not keep a copy."""
    # This attempt's number, 1-based as `job`, `logs` and `runs --job` count them (the record's `attempt` keeps the
    # reference's count of those made before it).
    job_id, attempt, way = str(job.id), attempts_made(job) + 1, launch.way
    return ContainerSpec(
        job_id=job_id,
        attempt=attempt,
        image=launch.image,
        job_dir=job_dir,
        environment={
            **launch.secrets,
            "PI_JOB_ID": job_id,
            "PI_JOB_ATTEMPT": str(attempt),
            "PI_JOB_KIND": str(data.get("kind") or job.name or ""),
            "PI_HOST": settings.worker_name,
            "PI_OFFLINE": "1",
            **(way.environment() if way is not None else {}),
            **launch.spend,
        },
        memory_mb=settings.job_memory_mb,
        cpus=settings.job_cpus,
        timeout_s=settings.job_timeout_ms / 1000,
        network=launch.network,
        user=settings.job_user,
        read_only=settings.job_read_only,
        log_mb=settings.job_log_mb,
        docker_log=not kept,
        resolver=way.resolver if way is not None else None,
        runtime=launch.runtime,
        stdin_key=launch.exit_key,
        masked=tuple(launch.secrets.values()),
    )


# Job networks are IPv4 only, filtered as IPv4: a job gets no IPv6 at all (Docker 20.10, Debian 12's, gives every
# container an IPv6 link-local address, which nothing filters). Not under runsc: gVisor keeps its own sysctls.
IPV6_OFF: Final = {"net.ipv6.conf.all.disable_ipv6": "1", "net.ipv6.conf.default.disable_ipv6": "1"}
# An egress job's upstream for Docker's embedded resolver (127.0.0.11): its own loopback, where nothing listens, so
# a name asked of the embedded resolver goes nowhere (CVE-2024-29018: affected daemons forwarded an internal
# network's lookups out through the host, a channel past the proxy).
NO_UPSTREAM: Final = ["127.0.0.1"]


def network_hardening(spec: ContainerSpec) -> dict[str, Any]:
    """The create's options that close a job's ways out beside its network's rules."""
    options: dict[str, Any] = {}
    if spec.runtime is None and spec.network != "host":
        options["sysctls"] = IPV6_OFF
    if spec.resolver is not None:
        options["dns"] = NO_UPSTREAM
    return options
