"""The worker's settings, each declared once: variable, host variable, kind, bounds, default, description, fix.

`WorkerSettings` is the one declaration. The JSON Schemas of the env file and of the inventory's host
variables are generated from it (`pi-dispatch config schema`), the inventory renders env files through it,
and the docs' settings table is checked against it. Values come from the sources of `sources.py`:
the process environment, or for `--env-file` that file alone, then the machine's defaults. `load_settings`
reads the raw values once, validates them against the published schema and through the model (`declaration.py`,
shared with the receiver), and reports every problem at once, each naming its variable, its source and its fix.
Secrets are `SecretStr` and never printed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import PrivateAttr, field_validator
from pydantic_settings import PydanticBaseSettingsSource

from pi_dispatch.config.agent_settings import AgentSettings
from pi_dispatch.config.declaration import ENV_ONLY, MS, load_declared, setting, unbounded
from pi_dispatch.config.forgevars import with_forge_variables
from pi_dispatch.config.handover import Secret
from pi_dispatch.config.kinds import (
    ContainerUser,
    Cpus,
    EgressProfiles,
    Flag,
    HostDir,
    HostFile,
    ImageList,
    ImageReference,
    JobNetwork,
    JobRuntime,
    ListenAddress,
    ProfileNames,
    SecretProfiles,
    Switch,
    WaitProfiles,
    Whole,
    WholeMs,
    WorkerName,
    Zone,
)
from pi_dispatch.config.limit_settings import LimitSettings
from pi_dispatch.config.script_settings import ScriptSettings
from pi_dispatch.config.sources import HostFacts, MachineDefaults
from pi_dispatch.config.store_settings import StoreSettings
from pi_dispatch.core.egress import EGRESS_NETWORK, PROXY_STATE_DIR
from pi_dispatch.core.providers import EVERY_KEY
from pi_dispatch.core.rehoming import REHOME_AFTER_MS, REHOME_FLOOR_MS


class HostSettings(StoreSettings):
    """What a worker is: its name, profiles, store, jobs and their containers (its limits: `limit_settings.py`)."""

    worker_name: WorkerName = setting(
        "PI_WORKER_NAME",
        "",
        "This host's worker name. Empty or unset: not declared (a name is derived from the hostname, "
        "routes=false, no host queue, no run mirror).",
        "1-64 letters, digits, dot, dash or underscore, starting with a letter or digit, not ending in .json "
        "or .log; or leave it empty to use a name derived from the hostname",
        host_var="name",
    )
    secret_profiles: SecretProfiles = setting(
        "PI_SECRET_PROFILES",
        {},
        "Secret profiles this host serves: name:/absolute/path/to/resolver, comma separated.",
        "write name:/absolute/path entries separated by commas; names use letters, digits, dot, dash and "
        "underscore; each name once",
    )
    wait_profiles: WaitProfiles = setting(
        "PI_WAIT_PROFILES",
        {},
        "Wait profiles this host serves: name:/absolute/path/to/check, comma separated.",
        "write name:/absolute/path entries separated by commas; names use letters, digits, dot, dash and "
        "underscore; each name once",
    )
    concurrency: Whole = setting(
        "PI_CONCURRENCY",
        3,
        "Containers this machine runs at once, across both queues it drains.",
        "a whole number from 1 to 999, digits only",
        ge=1,
        le=999,
    )
    logs_dir: HostDir = setting(
        "PI_LOGS_DIR",
        None,
        "Where run records (<id>.json) and captured logs (<id>.log) live; per host, never shared with other "
        "logs. Empty: ~/.pi-dispatch/logs.",
        "an absolute path such as /var/lib/pi-dispatch/logs",
    )
    jobs_dir: HostDir = setting(
        "PI_JOBS_DIR",
        None,
        "Where each running job's folder (event.json, job.json) lives while its container reads it at /job; "
        "per host, and a path the Docker daemon sees (not under a PrivateTmp /tmp). Empty: ~/.pi-dispatch/jobs.",
        "an absolute path such as /var/lib/pi-dispatch/jobs",
    )
    log_retention_days: Whole = setting(
        "PI_LOG_RETENTION_DAYS",
        30,
        "Days to keep run records and logs; 0 keeps them forever. Also bounds the fleet mirror (at most 92 days).",
        "a whole number of days from 0 to 36500; 0 keeps forever",
        ge=0,
        le=36_500,
    )
    capture_job_logs: Flag = setting(
        "PI_CAPTURE_JOB_LOGS",
        True,
        "1 keeps every attempt's output, its secrets masked, in <id>.log beside its record (it can hold issue and "
        "comment text); 0 keeps none, here or in the store.",
        "1 to capture, 0 or empty not to (the reference reads anything but 1 as off, so 'true' would "
        "silently mean off); true or false in the inventory",
    )
    job_log_store: Flag = setting(
        "PI_JOB_LOG_STORE",
        True,
        "1 also copies each attempt's masked output to the store, capped at PI_JOB_LOG_STORE_KB, so `pi-dispatch "
        "logs` reads it from any machine; 0 keeps it on this host only.",
        "1 to copy, 0 to keep the output on this host only; true or false in the inventory",
    )
    job_log_store_kb: Whole = setting(
        "PI_JOB_LOG_STORE_KB",
        1024,
        "The most of one attempt's output the store keeps, in KiB; the rest is counted and a marker says so.",
        "a whole number of KiB from 16 to 65536",
        ge=16,
        le=65_536,
    )
    job_image: ImageReference = setting(
        "PI_JOB_IMAGE",
        "pi-job:latest",
        "The job image a job runs in unless it names its own.",
        "an image reference such as pi-job:latest",
    )
    allowed_images: ImageList = setting(
        "PI_ALLOWED_IMAGES",
        (),
        "Images a job may name besides PI_JOB_IMAGE, comma separated; empty: only PI_JOB_IMAGE. A job naming any "
        "other is refused (job-image-not-allowed).",
        "image references such as pi-job:latest,registry.lan/pi-job:2, comma separated",
    )
    job_user: ContainerUser = setting(
        "PI_JOB_USER",
        None,
        "The user (and group) job containers run as, e.g. 1000:1000 or nobody. Empty: the image's own user.",
        "a user name or id, optionally :group, as docker run --user takes it",
    )
    job_read_only: Flag = setting(
        "PI_JOB_READ_ONLY",
        False,
        "1 runs job containers with a read-only root filesystem (a private /tmp stays writable).",
        "1 for a read-only root filesystem, 0 or empty not to; true or false in the inventory",
    )
    job_runtime: JobRuntime = setting(
        "PI_JOB_RUNTIME",
        None,
        "The Docker runtime every job container runs under, such as runsc (gVisor), checked at boot with a canary: "
        "a host whose runtime fails it takes no job. Empty: the daemon's default (runc).",
        "a runtime registered with the Docker daemon, such as runsc, or empty for its default",
    )
    runsc_profiles: ProfileNames = setting(
        "PI_RUNSC_PROFILES",
        (),
        "Profiles whose jobs run under runsc (gVisor) whatever PI_JOB_RUNTIME says, comma separated; this host "
        "serves them (advertises them for routing) only while runsc passes its boot canary.",
        "profile names separated by commas, such as deploy,untrusted",
    )
    job_log_mb: Whole = setting(
        "PI_JOB_LOG_MB",
        10,
        "The most of one attempt's output kept in its <id>.log, in MiB (a marker says what was dropped); with "
        "PI_CAPTURE_JOB_LOGS=0, the most a job container's output may take on the Docker host.",
        "a whole number of MiB from 1 to 1024",
        ge=1,
        le=1024,
    )
    egress: Switch = setting(
        "PI_EGRESS",
        True,
        "On (unset, empty or 1), a job's one way out is this host's egress proxy (`pi-dispatch egress-proxy`), which "
        "lets it reach only the names its allowlist lists; exactly 0 lets jobs reach what PI_JOB_NETWORK reaches.",
        "exactly 0 for no egress control, 1 or empty for egress through the proxy; true or false in the inventory",
    )
    job_network: JobNetwork = setting(
        "PI_JOB_NETWORK",
        None,
        f"The Docker network job containers join. Empty: {EGRESS_NETWORK}, the egress proxy's, with PI_EGRESS on; "
        "the daemon's default (bridge) with PI_EGRESS=0. `none` cuts them off either way.",
        f"a Docker network name such as {EGRESS_NETWORK}, none or pi-jobs",
    )
    egress_allowlist_file: HostFile = setting(
        "PI_EGRESS_ALLOWLIST_FILE",
        None,
        "The egress allowlist `pi-dispatch egress-proxy` enforces (the reference's grammar: one name per line, "
        ".example.com for a domain and its subdomains). Empty: egress-allowlist.conf beside the env file.",
        "an absolute path such as /etc/pi-dispatch/egress-allowlist.conf, or empty for the one beside the env file",
    )
    egress_profiles: EgressProfiles = setting(
        "PI_EGRESS_PROFILES",
        {},
        "Profiles with an egress allowlist of their own, name:/absolute/path/to/allowlist, comma separated: a job "
        "binding one reaches what its list lists instead of this host's list; a list of no entries: no network.",
        "name:/absolute/path entries separated by commas (the role renders pi_dispatch_worker_egress_profiles)",
        host_var=ENV_ONLY,
    )
    egress_state_dir: HostFile = setting(  # a folder; HostFile is the nullable absolute path
        "PI_EGRESS_STATE_DIR",
        None,
        f"The egress proxy's state folder (its rules, and the refusal log the worker reads to attach each refusal to "
        f"the attempt it refused). Empty: {PROXY_STATE_DIR}.",
        "an absolute path, or empty for the egress proxy's own",
    )
    job_timeout_ms: WholeMs = setting(
        "PI_JOB_TIMEOUT_MS",
        3_600_000,
        "Longest a job's container may run; then it is stopped and the run ends as job-timeout (not retried).",
        f"{MS} from 1 to 604800000 (7 days)",
        ge=1,
        le=604_800_000,
    )
    job_memory_mb: Whole = setting(
        "PI_JOB_MEMORY_MB",
        4096,
        "Memory limit of each job container, in MiB.",
        "a whole number of MiB from 6 to 1048576",
        ge=6,
        le=1_048_576,
    )
    job_cpus: Cpus = setting(
        "PI_JOB_CPUS",
        2.0,
        "CPU limit of each job container, in CPUs (0.01 to 9999.99).",
        "a number of CPUs such as 1, 1.5 or 0.25, from 0.01 to 9999.99",
        ge=0.01,
        le=9999.99,
    )
    drain_grace_ms: WholeMs = setting(
        "PI_DRAIN_GRACE_MS",
        20_000,
        "On SIGTERM, how long running containers may finish before they are stopped and their jobs put back "
        "on the queue. Keep the unit's stop timeout longer.",
        f"{MS} from 1 to 3600000",
        ge=1,
        le=3_600_000,
    )
    lock_duration_ms: WholeMs = unbounded(
        "PI_LOCK_DURATION_MS",
        30_000,
        "BullMQ job lock; a job whose worker died is taken up again within about twice this.",
    )
    rehome_after_ms: WholeMs = unbounded(
        "PI_REHOME_AFTER_MS",
        REHOME_AFTER_MS,
        f"How long a named host may be silent (no live registry row) before live workers move the jobs on its "
        f"queue to the live fleet; raised to at least {REHOME_FLOOR_MS}. Longer than a restart takes.",
    )
    steal: Flag = setting(
        "PI_STEAL",
        True,
        "1: with a free slot and nothing on its own or the shared queue, this host takes the oldest job waiting "
        "on a live peer's own queue that it can run (work stealing; a named host only). 0: it never does.",
        "1 to steal work from busy peers, 0 not to; true or false in the inventory",
    )
    steal_after_ms: WholeMs = setting(
        "PI_STEAL_AFTER_MS",
        3_000,
        "How long a job must have waited on a peer's queue before this host steals it, so a peer about to free "
        "a slot keeps its job.",
        f"{MS} from 0 to 3600000",
        ge=0,
        le=3_600_000,
    )
    clock_skew_max_ms: WholeMs = setting(
        "PI_CLOCK_SKEW_MAX_MS",
        5_000,
        "How far this host's clock may be from the store's before it stops taking jobs and re-homing (judging "
        "liveness and wait holds by a clock that far off would move live hosts' work or release holds early).",
        f"{MS} from 100 to 3600000",
        ge=100,
        le=3_600_000,
    )
    metrics_addr: ListenAddress = setting(
        "PI_METRICS_ADDR",
        "127.0.0.1:10470",
        "host:port of the worker's Prometheus metrics (GET /metrics); empty turns them off. The default listens on "
        "this host only, on a port outside the 9100-9999 range the Prometheus exporter allocations fill.",
        "host:port such as 127.0.0.1:10470 or 0.0.0.0:10470, or empty for no metrics",
    )
    tz: Zone = setting(
        "TZ",
        None,
        "The host's IANA zone. Cron patterns resolve in it: set the same TZ on every host.",
        "an IANA zone name such as UTC or Europe/Amsterdam",
    )
    triggers_file: HostFile = setting(
        "PI_TRIGGERS_FILE",
        None,
        "The triggers file whose cron entries this host schedules (watched, reconciled on change), and where a "
        'one-shot rule is disarmed after its run. Unset: cron is disabled (fpCron ""); disarms go to '
        "./triggers.json. The role renders it from pi_dispatch_worker_triggers_source.",
        "an absolute path such as /etc/pi-dispatch/triggers.json, or empty for no cron",
        host_var=ENV_ONLY,
    )

    _declared_name: bool = PrivateAttr(False)

    @field_validator("rehome_after_ms")
    @classmethod
    def _at_least_the_rehome_floor(cls, value: int) -> int:
        return max(REHOME_FLOOR_MS, value)

    @property
    def worker_name_declared(self) -> bool:
        """Whether PI_WORKER_NAME was set: only then does the host drain a queue of its own and mirror runs."""
        return self._declared_name

    @property
    def jobs_network(self) -> str | None:
        """The network job containers join (None: the daemon's default)."""
        return self.job_network or (EGRESS_NETWORK if self.egress else None)

    @property
    def egress_network(self) -> str | None:
        """The egress network whose proxy is jobs' one way out; None with PI_EGRESS=0 or jobs cut off (`none`)."""
        return self.jobs_network if self.egress and self.jobs_network != "none" else None

    @classmethod
    def machine_defaults(cls, facts: HostFacts) -> PydanticBaseSettingsSource | None:
        return MachineDefaults(cls, facts)


class DeclaredWorkerSettings(LimitSettings, AgentSettings, HostSettings, ScriptSettings):
    """The typed configuration a worker runs with, in the order the env file lists it: its scripts', the host's,
    then its limits; then the forges' variables it reads (`forgevars.py`: declared in each forge's entry)."""


if TYPE_CHECKING:  # a forge's variables are read by name (`forgeapi/common.forge_setting`), so typed as declared
    WorkerSettings = DeclaredWorkerSettings
else:
    WorkerSettings = with_forge_variables(DeclaredWorkerSettings, "WorkerSettings", worker_only=True)


def load_settings(
    env_file: Path | None = None,
    *,
    facts: HostFacts | None = None,
    environment: Callable[[], Mapping[str, str]] | None = None,
) -> WorkerSettings:
    """The worker's settings from the process environment, or from env_file alone. Raises ConfigError."""
    settings, raw = load_declared(WorkerSettings, "worker-env", env_file, facts=facts, environment=environment)
    settings._declared_name = bool(raw.values.get("PI_WORKER_NAME"))
    by_name = {*EVERY_KEY, getattr(settings, "github_pat_var", None)}
    settings._credentials = {name: Secret(value) for name, value in raw.everything.items() if name in by_name and value}
    return settings
