"""The worker's variables as the inventory, the schemas and the docs read them: each by its setting, in the env file's
order, and a set of raw values checked as the worker would check them (`worker_settings.py` declares them)."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic.fields import FieldInfo

from pi_dispatch.config.declaration import check_env
from pi_dispatch.config.sources import ENVIRONMENT
from pi_dispatch.config.worker_settings import WorkerSettings
from pi_dispatch.core.errors import Problem


def fields_by_variable() -> dict[str, tuple[str, FieldInfo]]:
    """Every setting by its env variable, in declaration order: (field name, field)."""
    return {str(info.validation_alias): (name, info) for name, info in WorkerSettings.model_fields.items()}


def variables() -> tuple[str, ...]:
    """Every variable the worker reads, in the order the env file lists them."""
    return tuple(fields_by_variable())


def check_worker_env(raw: Mapping[str, str], source: str = ENVIRONMENT) -> list[Problem]:
    return check_env(WorkerSettings, raw, source)
