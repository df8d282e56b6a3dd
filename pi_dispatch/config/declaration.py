"""Settings declared once, on a pydantic-settings model: `setting()` declares one (its variable, default,
description, fix and bounds), `DeclaredSettings` reads them from one place (an env file alone, as systemd gives it,
or the process environment) and then the machine's defaults, remembering where each value came from, and
`load_declared` checks the raw values against the published schema and through the model, reporting every
problem at once. The worker's settings (`worker_settings.py`) and the receiver's (`receiver_settings.py`) are two.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

from pydantic import Field, PrivateAttr, ValidationError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from pi_dispatch.config.kinds import X_FIX, X_HOST_VAR, field_problems
from pi_dispatch.config.schemas import explained, problems
from pi_dispatch.config.sources import ENVIRONMENT, HostFacts, RawValues, read_raw
from pi_dispatch.core.errors import ConfigError, Problem

DEFAULT: Final = "default"


# A setting no inventory variable declares directly: the role renders it (the deployed triggers file's path).
ENV_ONLY: Final = "-"
# The env-file grammar allowed 15 digits before any bound was declared; a setting with no natural limit keeps that.
WHOLE_MAX: Final = 999_999_999_999_999
MS: Final = "a whole number of milliseconds"


def setting(
    variable: str, default: Any, description: str, fix: str = "", *, host_var: str | None = None, **bounds: Any
) -> Any:
    """One setting's declaration: its env variable, default, description, fix, bounds; host var when not derived."""
    facts: dict[str, Any] = {X_FIX: fix} | ({X_HOST_VAR: host_var} if host_var else {})
    return Field(default, validation_alias=variable, description=description, json_schema_extra=facts, **bounds)


def unbounded(variable: str, default: int, description: str, fix: str = f"{MS}, 1 or more") -> Any:
    """A whole-number setting with no natural upper limit: 1 or more, as the env grammar always allowed."""
    return setting(variable, default, description, fix, ge=1, le=WHOLE_MAX)


class DeclaredSettings(BaseSettings):
    """Settings declared with `setting()`, read from one place (an env file alone, or the environment) and then
    the machine's defaults, each value remembering where it came from. The worker's and the receiver's."""

    model_config = SettingsConfigDict(frozen=True, case_sensitive=True, extra="ignore")
    _sources: dict[str, str] = PrivateAttr(default_factory=dict)

    @classmethod
    def machine_defaults(cls, facts: HostFacts) -> PydanticBaseSettingsSource | None:
        """The defaults that depend on the machine, if any."""
        return None

    @property
    def sources(self) -> dict[str, str]:
        """Where each setting came from: the env file, the environment, or `default`."""
        return dict(self._sources)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Values passed in; then the env file when one is given (alone, as systemd gives it), else the
        environment; then the machine's defaults. `load_declared` hands over the values it already read."""
        reading = _reading.get()
        if reading is None:
            env_file = getattr(dotenv_settings, "env_file", None)
            raw = read_raw(settings_cls, Path(str(env_file)) if isinstance(env_file, str | Path) else None)
            reading = _Reading(raw, HostFacts.of_this_machine())
        defaults = cls.machine_defaults(reading.facts)
        return (init_settings, reading.raw) + ((defaults,) if defaults is not None else ())


@dataclass(frozen=True)
class _Reading:
    raw: RawValues
    facts: HostFacts


# pydantic-settings builds its sources in a classmethod and takes no per-call context, so the values a load
# has already read (and the machine's facts) reach `settings_customise_sources` through this variable.
_reading: ContextVar[_Reading | None] = ContextVar("pi_dispatch_settings_reading", default=None)


@contextmanager
def _handed_over(reading: _Reading) -> Iterator[None]:
    token = _reading.set(reading)
    try:
        yield
    finally:
        _reading.reset(token)


Declared = TypeVar("Declared", bound=DeclaredSettings)


def _validated(model: type[Declared], raw: RawValues, facts: HostFacts) -> tuple[Declared | None, list[Problem]]:
    """The settings the raw values make, or the model's problems with them."""
    try:
        with _handed_over(_Reading(raw, facts)):
            settings = model()
    except ValidationError as error:
        return None, field_problems(error, model, raw.values, raw.label)
    settings._sources = {
        name: raw.label if str(info.validation_alias) in raw.values else DEFAULT
        for name, info in model.model_fields.items()
    }
    return settings, []


def check_env(model: type[DeclaredSettings], raw: Mapping[str, str], source: str = ENVIRONMENT) -> list[Problem]:
    """A model's own verdict on raw values, without the schema (for agreement tests and the inventory)."""
    return _validated(model, RawValues(model, raw, source), HostFacts("localhost", None, 0))[1]


def load_declared(
    model: type[Declared],
    schema: str,
    env_file: Path | None = None,
    *,
    facts: HostFacts | None = None,
    environment: Callable[[], Mapping[str, str]] | None = None,
) -> tuple[Declared, RawValues]:
    """Settings from the process environment, or from env_file alone, checked against their published schema and
    through the model, with the raw values read. Raises ConfigError naming every problem."""
    raw = read_raw(model, env_file, environment() if environment is not None else None)
    settings, own = _validated(model, raw, facts or HostFacts.of_this_machine())
    # every name the place holds, so a variable that is nearly a setting is refused with the one it resembles
    found = raw.problems + explained(problems(schema, raw.everything, raw.label), own)
    if found or settings is None:
        raise ConfigError(found)
    return settings, raw
