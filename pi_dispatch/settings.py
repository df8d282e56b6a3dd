"""The worker's configuration: raw strings validated against worker-env.schema.json, then typed.

Values come from the process environment (read by pydantic-settings) or, for `config check
--env-file`, from one env file alone, so a check sees exactly what systemd would give the worker. The
schema is applied first; the typed parse below checks every value again on its own, so the two can be
tested against each other. Every problem is reported at once, each naming its variable, its source and
its fix. Secrets are `SecretStr` and never printed.
"""

from __future__ import annotations

import os
import re
import socket
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, SecretStr, create_model
from pydantic_settings import BaseSettings, SettingsConfigDict

from pi_dispatch.envfile import read_env_file
from pi_dispatch.errors import ConfigError, Problem
from pi_dispatch.names import sanitize_worker_name, worker_name_problem
from pi_dispatch.profiles import ProfileKind, parse_profiles
from pi_dispatch.schemas import MAX_PROFILES, load_schema, problems

ENVIRONMENT: Final = "environment"
DEFAULT: Final = "default"
WAIT_INTERVAL_FLOOR_MS: Final = 30_000
_POSITIVE: Final = re.compile(r"[ \t]*([1-9][0-9]{0,14})[ \t]*")
_NON_NEGATIVE: Final = re.compile(r"[ \t]*(0|[1-9][0-9]{0,14})[ \t]*")
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")
_URL: Final = re.compile(r"(?:redis|rediss|unix)://[^\x00-\x20\x7f]+")
_ABSOLUTE: Final = re.compile(r"(?:|/[^\x00-\x1f\x7f]*)")
_IMAGE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@-]*")
_ZONE: Final = re.compile(r"(?:|:?[A-Za-z0-9_+./-]+)")
POSITIVE_INTS: Final = (
    "PI_CONCURRENCY",
    "PI_SECRET_RESOLVE_TIMEOUT_MS",
    "PI_WAIT_CHECK_TIMEOUT_MS",
    "PI_WAIT_INTERVAL_MS",
    "PI_WAIT_MAX_MS",
    "PI_WAIT_AFTER_MAX_MS",
    "PI_WAIT_CHECK_SLOTS",
    "PI_WAIT_MAX_CHECKS",
    "PI_WAIT_MAX_FAULTS",
    "PI_JOB_TIMEOUT_MS",
    "PI_JOB_MEMORY_MB",
    "PI_DRAIN_GRACE_MS",
    "PI_LOCK_DURATION_MS",
)
_CPUS: Final = re.compile(r"[ \t]*([1-9][0-9]{0,3}(?:\.[0-9]{1,2})?|0\.(?:[1-9][0-9]?|0[1-9]))[ \t]*")


SETTING_OF: Final = {
    "PI_WORKER_NAME": "worker_name",
    "PI_SECRET_PROFILES": "secret_profiles",
    "PI_WAIT_PROFILES": "wait_profiles",
    "VALKEY_URL": "valkey_url",
    "VALKEY_PASSWORD": "valkey_password",
    "PI_CONCURRENCY": "concurrency",
    "PI_LOGS_DIR": "logs_dir",
    "PI_JOBS_DIR": "jobs_dir",
    "PI_LOG_RETENTION_DAYS": "log_retention_days",
    "PI_CAPTURE_JOB_LOGS": "capture_job_logs",
    "PI_JOB_IMAGE": "job_image",
    "PI_JOB_TIMEOUT_MS": "job_timeout_ms",
    "PI_JOB_MEMORY_MB": "job_memory_mb",
    "PI_JOB_CPUS": "job_cpus",
    "PI_DRAIN_GRACE_MS": "drain_grace_ms",
    "PI_LOCK_DURATION_MS": "lock_duration_ms",
    "PI_SECRET_RESOLVE_TIMEOUT_MS": "secret_resolve_timeout_ms",
    "PI_WAIT_CHECK_TIMEOUT_MS": "wait_check_timeout_ms",
    "PI_WAIT_INTERVAL_MS": "wait_interval_ms",
    "PI_WAIT_MAX_MS": "wait_max_ms",
    "PI_WAIT_AFTER_MAX_MS": "wait_after_max_ms",
    "PI_WAIT_CHECK_SLOTS": "wait_check_slots",
    "PI_WAIT_MAX_CHECKS": "wait_max_checks",
    "PI_WAIT_MAX_FAULTS": "wait_max_faults",
    "TZ": "tz",
}


def variables() -> tuple[str, ...]:
    """Every variable the worker reads, in the schema's order."""
    return tuple(load_schema("worker-env")["properties"])


def schema_default(variable: str) -> str:
    return str(load_schema("worker-env")["properties"][variable].get("default", ""))


def _process_environment_model() -> type[BaseSettings]:
    """A settings class with one optional string field per variable, read by pydantic-settings' env source."""
    fields: dict[str, Any] = {
        variable.lower(): (str | None, Field(default=None, validation_alias=variable)) for variable in variables()
    }
    model: type[BaseSettings] = create_model(
        "ProcessEnvironment",
        __base__=BaseSettings,
        __config__=None,
        **fields,
    )
    model.model_config = SettingsConfigDict(case_sensitive=True, extra="ignore", env_parse_none_str=None)
    return model


def read_process_environment() -> dict[str, str]:
    """The worker's variables that are set in the process environment, as raw strings."""
    read = _process_environment_model()()
    return {variable: value for variable in variables() if (value := getattr(read, variable.lower())) is not None}


class WorkerSettings(BaseModel):
    """The typed configuration a worker runs with."""

    model_config = ConfigDict(frozen=True)

    worker_name: str
    worker_name_declared: bool
    secret_profiles: dict[str, str]
    wait_profiles: dict[str, str]
    valkey_url: str
    valkey_password: SecretStr | None
    concurrency: int
    logs_dir: Path
    jobs_dir: Path
    log_retention_days: int
    capture_job_logs: bool
    job_image: str
    job_timeout_ms: int
    job_memory_mb: int
    job_cpus: float
    drain_grace_ms: int
    lock_duration_ms: int
    secret_resolve_timeout_ms: int
    wait_check_timeout_ms: int
    wait_interval_ms: int
    wait_max_ms: int
    wait_after_max_ms: int
    wait_check_slots: int
    wait_max_checks: int
    wait_max_faults: int
    tz: str | None
    sources: dict[str, str]


@dataclass(frozen=True)
class HostFacts:
    """What the settings need to know about the machine, passed in so parsing stays testable."""

    hostname: str
    home: Path | None
    euid: int

    @classmethod
    def of_this_machine(cls) -> HostFacts:
        home = os.environ.get("HOME")
        return cls(socket.gethostname(), Path(home) if home else None, os.geteuid())

    def default_dir(self, name: str) -> Path:
        if self.home is not None:
            return self.home / ".pi-dispatch" / name
        return Path(tempfile.gettempdir()) / f"pi-dispatch-{self.euid}" / name

    def default_logs_dir(self) -> Path:
        return self.default_dir("logs")


# variable -> (pattern its whole value must match, what is wrong, the fix); checked without the schema
_SHAPES: Final[dict[str, tuple[re.Pattern[str], str, str]]] = {
    **dict.fromkeys(
        POSITIVE_INTS, (_POSITIVE, "is not a whole number of 1 or more", "digits only, no units, no leading zero")
    ),
    "PI_LOG_RETENTION_DAYS": (_NON_NEGATIVE, "is not a whole number of days", "0 keeps forever"),
    "VALKEY_URL": (_URL, "is not a redis://, rediss:// or unix:// URL", "e.g. redis://store.lan:6379/0"),
    "PI_LOGS_DIR": (_ABSOLUTE, "is not an absolute path", "e.g. /var/lib/pi-dispatch/logs"),
    "PI_JOBS_DIR": (_ABSOLUTE, "is not an absolute path", "e.g. /var/lib/pi-dispatch/jobs"),
    "PI_CAPTURE_JOB_LOGS": (re.compile(r"[01]?"), "is neither 1 nor 0", "1 to capture, 0 or empty not to"),
    "PI_JOB_IMAGE": (_IMAGE, "is not an image reference", "e.g. pi-job:latest"),
    "PI_JOB_CPUS": (_CPUS, "is not a number of CPUs from 0.01 to 9999.99", "e.g. 1, 1.5 or 0.25"),
    "TZ": (_ZONE, "is not a zone name", "an IANA zone such as UTC or Europe/Amsterdam"),
}


def _check(raw: Mapping[str, str], source: str) -> list[Problem]:
    """Every value checked on its own terms, independently of the schema."""
    found: list[Problem] = []
    name = raw.get("PI_WORKER_NAME", "")
    if name and (problem := worker_name_problem(name)):
        fix = "rename it, or leave it empty to use a name derived from the hostname"
        found.append(Problem("PI_WORKER_NAME", f"{name!r} {problem}", source, fix))
    found += _profile_problems(raw.get("PI_SECRET_PROFILES"), "secret", source)
    found += _profile_problems(raw.get("PI_WAIT_PROFILES"), "wait", source)
    if _CONTROL.search(raw.get("VALKEY_PASSWORD", "")):
        found.append(Problem("VALKEY_PASSWORD", "holds a control character", source, "one line, no control characters"))
    for variable, (shape, wrong, fix) in _SHAPES.items():
        if variable in raw and not shape.fullmatch(raw[variable]):
            found.append(Problem(variable, f"{raw[variable]!r} {wrong}", source, fix))
    return found


def _profile_problems(raw: str | None, kind: ProfileKind, source: str) -> list[Problem]:
    variable = "PI_SECRET_PROFILES" if kind == "secret" else "PI_WAIT_PROFILES"
    if raw is not None and _CONTROL.search(raw.replace("\t", " ")):
        return [Problem(variable, "holds a control character", source, "keep the value on one line")]
    parsed = parse_profiles(raw, kind, source)
    if len(parsed.table) > MAX_PROFILES:
        return [
            Problem(variable, f"declares {len(parsed.table)} profiles; at most {MAX_PROFILES}", source, "declare fewer")
        ]
    return parsed.problems


def check_worker_env(raw: Mapping[str, str], source: str = ENVIRONMENT) -> list[Problem]:
    """The typed parse's own verdict on raw values, without the schema (for agreement tests)."""
    return _check(raw, source)


def parse_worker_env(raw: Mapping[str, str], source: str, facts: HostFacts) -> WorkerSettings:
    """Typed settings from raw values that passed validation."""

    def value(variable: str) -> str:
        return raw[variable] if variable in raw else schema_default(variable)

    def integer(variable: str) -> int:
        return int(value(variable).strip(" \t"))

    name = raw.get("PI_WORKER_NAME", "")
    password = raw.get("VALKEY_PASSWORD")
    logs = raw.get("PI_LOGS_DIR", "")
    jobs = raw.get("PI_JOBS_DIR", "")
    return WorkerSettings(
        worker_name=name or sanitize_worker_name(facts.hostname),
        worker_name_declared=bool(name),
        secret_profiles=parse_profiles(raw.get("PI_SECRET_PROFILES"), "secret", source).table,
        wait_profiles=parse_profiles(raw.get("PI_WAIT_PROFILES"), "wait", source).table,
        valkey_url=value("VALKEY_URL"),
        valkey_password=SecretStr(password) if password else None,
        concurrency=integer("PI_CONCURRENCY"),
        logs_dir=Path(logs) if logs else facts.default_logs_dir(),
        jobs_dir=Path(jobs) if jobs else facts.default_dir("jobs"),
        log_retention_days=integer("PI_LOG_RETENTION_DAYS"),
        capture_job_logs=raw.get("PI_CAPTURE_JOB_LOGS") == "1",
        job_image=value("PI_JOB_IMAGE"),
        job_timeout_ms=integer("PI_JOB_TIMEOUT_MS"),
        job_memory_mb=integer("PI_JOB_MEMORY_MB"),
        job_cpus=float(value("PI_JOB_CPUS").strip(" \t")),
        drain_grace_ms=integer("PI_DRAIN_GRACE_MS"),
        lock_duration_ms=integer("PI_LOCK_DURATION_MS"),
        secret_resolve_timeout_ms=integer("PI_SECRET_RESOLVE_TIMEOUT_MS"),
        wait_check_timeout_ms=integer("PI_WAIT_CHECK_TIMEOUT_MS"),
        wait_interval_ms=max(WAIT_INTERVAL_FLOOR_MS, integer("PI_WAIT_INTERVAL_MS")),
        wait_max_ms=integer("PI_WAIT_MAX_MS"),
        wait_after_max_ms=integer("PI_WAIT_AFTER_MAX_MS"),
        wait_check_slots=integer("PI_WAIT_CHECK_SLOTS"),
        wait_max_checks=integer("PI_WAIT_MAX_CHECKS"),
        wait_max_faults=integer("PI_WAIT_MAX_FAULTS"),
        tz=raw.get("TZ") or None,
        sources={SETTING_OF[variable]: source if variable in raw else DEFAULT for variable in variables()},
    )


def _explained(schema_problems: list[Problem], own_problems: list[Problem]) -> list[Problem]:
    """The schema's verdict, each variable worded by the typed check where it has a more specific message."""

    def variable(problem: Problem) -> str:
        return problem.subject.split(" ", 1)[0]

    specific: dict[str, list[Problem]] = {}
    for problem in own_problems:
        specific.setdefault(variable(problem), []).append(problem)
    merged: list[Problem] = []
    for name in dict.fromkeys(map(variable, schema_problems)):
        if name in specific:
            merged += specific.pop(name)
        else:
            merged += [problem for problem in schema_problems if variable(problem) == name]
    return merged + [problem for rest in specific.values() for problem in rest]


def load_settings(
    env_file: Path | None = None,
    *,
    facts: HostFacts | None = None,
    environment: Callable[[], Mapping[str, str]] | None = None,
) -> WorkerSettings:
    """The worker's settings from the process environment, or from env_file alone. Raises ConfigError."""
    if env_file is not None:
        parsed = read_env_file(env_file)
        raw = {name: parsed.values[name] for name in variables() if name in parsed.values}
        source, found = parsed.source, list(parsed.problems)
    else:
        raw = dict(environment()) if environment else read_process_environment()
        source, found = ENVIRONMENT, []
    found += _explained(problems("worker-env", raw, source), _check(raw, source))
    if found:
        raise ConfigError(found)
    return parse_worker_env(raw, source, facts or HostFacts.of_this_machine())
