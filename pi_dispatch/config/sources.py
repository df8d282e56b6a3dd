"""Where a worker's settings come from: an env file read as systemd reads it, the process environment, or a
mapping handed over; and the machine's own defaults (the name from the hostname, the folders under $HOME).

Each is a pydantic-settings source, so `WorkerSettings` reads them through its `settings_customise_sources`.
A value that is blank where blank means "the default" is left out, so a lower source supplies it.
"""

from __future__ import annotations

import os
import socket
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource

from pi_dispatch.config.envfile import read_env_file
from pi_dispatch.config.kinds import form_of
from pi_dispatch.core.errors import Problem
from pi_dispatch.core.names import worker_name_of

ENVIRONMENT: Final = "environment"


@dataclass(frozen=True)
class HostFacts:
    """What the settings need to know about the machine, passed in so loading stays testable."""

    hostname: str
    home: Path | None
    euid: int

    @classmethod
    def of_this_machine(cls) -> HostFacts:
        home = os.environ.get("HOME")
        return cls(socket.gethostname(), Path(home) if home else None, os.geteuid())

    def default_dir(self, name: str) -> Path:
        if self.home is not None and self.home.is_absolute():
            return self.home / ".pi-dispatch" / name
        return Path(tempfile.gettempdir()) / f"pi-dispatch-{self.euid}" / name

    def default_logs_dir(self) -> Path:
        return self.default_dir("logs")


class RawValues(PydanticBaseSettingsSource):
    """The worker's variables as the strings one place holds them; a blank that means "the default" is left out."""

    def __init__(self, settings_cls: type[BaseSettings], values: Mapping[str, str], label: str) -> None:
        super().__init__(settings_cls)
        known = {str(info.validation_alias): info for info in settings_cls.model_fields.values()}
        self.label = label
        self.everything = dict(values)  # every variable of the place, for one a setting names (GITHUB_PAT_VAR)
        self.values = {name: value for name, value in values.items() if name in known}
        self.problems: list[Problem] = []
        blank_default = {name for name, info in known.items() if form_of(info).blank_is_default}
        self._given = {name: value for name, value in self.values.items() if value or name not in blank_default}

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self._given.get(str(field.validation_alias)), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self._given)


class MachineDefaults(PydanticBaseSettingsSource):
    """The defaults that depend on the machine: the worker name from the hostname, the folders under $HOME."""

    def __init__(self, settings_cls: type[BaseSettings], facts: HostFacts) -> None:
        super().__init__(settings_cls)
        self.values = {
            "PI_WORKER_NAME": worker_name_of(None, facts.hostname),
            "PI_LOGS_DIR": str(facts.default_dir("logs")),
            "PI_JOBS_DIR": str(facts.default_dir("jobs")),
        }

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self.values.get(str(field.validation_alias)), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self.values)


def read_raw(
    settings_cls: type[BaseSettings], env_file: Path | None, environment: Mapping[str, str] | None = None
) -> RawValues:
    """The raw values of one load: the env file alone, else the given mapping, else the process environment."""
    if env_file is not None:
        parsed = read_env_file(env_file)
        raw = RawValues(settings_cls, parsed.values, parsed.source)
        raw.problems = list(parsed.problems)
        return raw
    if environment is None:
        raw = RawValues(settings_cls, EnvSettingsSource(settings_cls, case_sensitive=True)(), ENVIRONMENT)
        raw.everything = dict(os.environ)  # a variable a setting names (GITHUB_PAT_VAR) is no setting of its own
        return raw
    return RawValues(settings_cls, environment, ENVIRONMENT)
