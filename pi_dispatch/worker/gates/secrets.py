"""The secret gate: a job's `secrets` resolved through its profile's resolver script, or the job refused by name.

A resolver's stdout is the secret (one trailing newline stripped, 64 KiB at most). Nothing here logs or returns a
path, a reference or a value: refusals carry names and reasons only.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal

from pi_dispatch.core.jobenv import reserved_secret_name
from pi_dispatch.core.profiles import DEFAULT_SECRET_PROFILE
from pi_dispatch.core.providers import key_candidates
from pi_dispatch.core.reasons import ExitCode, Reason
from pi_dispatch.worker.gates.scripts import (
    InfraRetry,
    Refusal,
    count,
    counted,
    exit_code,
    is_argument,
    read_capped,
    release,
    script_environment,
    spawn,
    stop,
    usable_script,
)

if TYPE_CHECKING:
    from pi_dispatch.config.worker_settings import WorkerSettings

MAX_SECRET_BYTES: Final = 65_536


# Each binding runs the resolver once, up to its timeout: more than this is never a real job's need.
MAX_SECRET_BINDINGS: Final = 64


MAX_REFERENCE_CHARS: Final = 1_024


SecretFailure = Literal["exit", "empty", "nul", "overflow"]


@dataclass(frozen=True)
class Resolved:
    """A resolver's answer for one reference: a value, or why there is none."""

    value: str | None
    failure: SecretFailure | None = None
    stderr_bytes: int = 0


async def resolve_reference(
    script: Path, reference: str, timeout_s: float, env: Mapping[str, str] | None = None
) -> Resolved:
    """Run the resolver once for one reference. Raises InfraRetry for anything worth retrying."""
    try:
        process = await spawn(script, reference, env)
    except OSError as error:
        raise InfraRetry(Reason.SECRET_RESOLVER_UNREACHABLE) from error
    assert process.stdout is not None and process.stderr is not None
    stderr = asyncio.ensure_future(count(process.stderr))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s  # one bound for the whole run, reading and exiting alike
    try:
        output, overflow = await asyncio.wait_for(read_capped(process.stdout, MAX_SECRET_BYTES), timeout_s)
        if overflow:
            await stop(process)
            return Resolved(None, "overflow")
        code = await exit_code(process, max(0.0, deadline - loop.time()))
    except TimeoutError as error:
        await stop(process)
        raise InfraRetry(Reason.SECRET_RESOLVER_UNREACHABLE) from error
    finally:
        if not stderr.done():
            stderr.cancel()
        release(process)
    stderr_bytes = counted(stderr)
    if code == ExitCode.POLICY:
        return Resolved(None, "exit", stderr_bytes)
    if code != ExitCode.OK:
        raise InfraRetry(Reason.SECRET_RESOLVER_UNREACHABLE)
    text = output.decode("utf-8", "replace")
    if text.endswith("\r\n"):
        text = text[:-2]
    elif text.endswith("\n"):
        text = text[:-1]
    if text == "":
        return Resolved(None, "empty", stderr_bytes)
    if "\x00" in text:
        return Resolved(None, "nul", stderr_bytes)
    return Resolved(text, None, stderr_bytes)


@dataclass
class SecretsGate:
    """Resolves a job's `secrets` through its profile's resolver, or refuses the job by name."""

    profiles: Mapping[str, str]
    timeout_s: float = 10.0
    env: Mapping[str, str] | None = None
    reserved: frozenset[str] = field(default_factory=frozenset)
    provider: str = ""  # the host's default provider: a job's secret may not bind its key's variables either

    @classmethod
    def of(cls, settings: WorkerSettings, reserved: frozenset[str]) -> SecretsGate:
        """The host's gate: its profiles, its timeout, the closed environment its resolvers run in."""
        timeout_s = settings.secret_resolve_timeout_ms / 1000
        environment = script_environment(settings.script_env)
        return cls(settings.secret_profiles, timeout_s, environment, reserved, getattr(settings, "provider", ""))

    def reserves(self, job: Mapping[str, object], variable: str) -> bool:
        """Whether a job's secret may not bind this variable: a reserved name, or its provider's key (pre-spend,
        as the reference checks it: the job's provider is known only now)."""
        provider = job.get("provider") if isinstance(job.get("provider"), str) else self.provider
        return reserved_secret_name(variable) or variable in self.reserved or variable in key_candidates(str(provider))

    @staticmethod
    def _binding(job: Mapping[str, object]) -> tuple[str, Mapping[object, object]] | None:
        """The profile a job binds and its name → reference map; None when it binds no secret."""
        profile = job.get("secretsProfile")
        secrets = job.get("secrets")
        bound = secrets if isinstance(secrets, Mapping) else {}
        if not (isinstance(profile, str) and profile) and not bound:
            return None
        return (profile if isinstance(profile, str) and profile else DEFAULT_SECRET_PROFILE), bound

    def bound_profile(self, job: Mapping[str, object]) -> str | None:
        """The profile whose resolver a job's secrets go through (`default` when it names none), or None."""
        binding = self._binding(job)
        return binding[0] if binding is not None else None

    def refusal(self, job: Mapping[str, object]) -> Refusal | None:
        """The table lookups that refuse a job before anything runs: an undeclared profile, a reserved name."""
        binding = self._binding(job)
        if binding is None:
            return None
        name, bound = binding
        declared = self.profiles.get(name)
        if declared is None or usable_script(declared) is None:
            return Refusal(Reason.SECRET_PROFILE_UNKNOWN, name)
        if any(
            not isinstance(variable, str) or not ENV_NAME.fullmatch(variable) or self.reserves(job, variable)
            for variable in bound
        ):
            return Refusal(Reason.SECRET_NAME_RESERVED, name)
        if len(bound) > MAX_SECRET_BINDINGS:
            return Refusal(Reason.SECRET_BINDINGS_TOO_MANY, name)
        if not all(is_argument(reference, MAX_REFERENCE_CHARS) for reference in bound.values()):
            return Refusal(Reason.SECRET_REFERENCE_INVALID, name)
        return None

    async def resolve(self, job: Mapping[str, object]) -> dict[str, str] | Refusal:
        """Env values for the job's secrets ({} when it binds none); Refusal; or InfraRetry raised."""
        binding = self._binding(job)
        if binding is None:
            return {}
        if refused := self.refusal(job):
            return refused
        name, bound = binding
        script = usable_script(self.profiles[name])
        if script is None:  # removed since the lookup
            return Refusal(Reason.SECRET_PROFILE_UNKNOWN, name)
        values: dict[str, str] = {}
        by_reference: dict[str, str] = {}
        for variable, reference in bound.items():
            if not isinstance(reference, str):
                return Refusal(Reason.SECRET_UNRESOLVED, name)
            if reference not in by_reference:
                answer = await resolve_reference(script, reference, self.timeout_s, self.env)
                if answer.value is None:
                    return Refusal(Reason.SECRET_UNRESOLVED, name)
                by_reference[reference] = answer.value
            values[str(variable)] = by_reference[reference]
        return values


ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
