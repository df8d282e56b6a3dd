"""The published schemas of the worker's env file and the inventory's host variables, generated from the one
declaration of each setting (`WorkerSettings`) and of the role's own variables (`RoleVars`).

`pi-dispatch config schema` prints or writes them; a test fails when the files under `schemas/` differ from
what this generates, so the contract cannot drift from the code. Pure.
"""

from __future__ import annotations

import json
from typing import Any, Final

from pydantic.fields import FieldInfo

from pi_dispatch.config.console_settings import ConsoleSettings
from pi_dispatch.config.declaration import DeclaredSettings
from pi_dispatch.config.kinds import X_FIX, bounds_of, extra, form_of
from pi_dispatch.config.receiver_settings import RECEIVER_MODEL
from pi_dispatch.config.rolevars import PREFIX, RoleVars, host_variable
from pi_dispatch.config.worker_settings import WorkerSettings
from pi_dispatch.core.jobs import JOB_VARIABLES

GENERATED: Final = ("worker-env", "host-vars", "receiver-env", "console-env")
# The prefixes of the variables pi-dispatch reads: one of these that no process of it reads is a typo.
OWNED_PREFIXES: Final = ("PI_", "VALKEY_", "RECEIVER_", "WEBHOOK_")
DRAFT: Final = "https://json-schema.org/draft/2020-12/schema"
ID: Final = "https://pi-dispatch.dev/schemas/{name}.schema.json"


def _property(info: FieldInfo, schema: dict[str, Any], description: str | None) -> dict[str, Any]:
    return {**schema, "description": description, X_FIX: extra(info, X_FIX)}


def _document(name: str, title: str, description: str, body: dict[str, Any]) -> dict[str, Any]:
    generated_by = " Generated from the settings declaration by `pi-dispatch config schema`."
    return {
        "$schema": DRAFT,
        "$id": ID.format(name=name),
        "title": title,
        "description": description + generated_by,
        "type": "object",
        **body,
    }


def env_schema(model: type[DeclaredSettings], name: str, title: str, description: str) -> dict[str, Any]:
    """Every variable a process reads, as the strings they are in a systemd EnvironmentFile."""
    properties: dict[str, Any] = {}
    for info in model.model_fields.values():
        form = form_of(info)
        default = {} if info.default is None else {"default": form.env_text(info.default)}
        schema = {"type": "string", **default, **form.env_schema(bounds_of(info))}
        properties[str(info.validation_alias)] = _property(info, schema, info.description)
    refused = f"^({'|'.join(OWNED_PREFIXES)})"
    return _document(
        name,
        title,
        description + f" A variable named {', '.join(OWNED_PREFIXES)}... that no pi-dispatch process reads is "
        "refused (almost always a typo); others are allowed (the process environment holds many).",
        {
            "additionalProperties": {"type": "string"},
            "properties": properties,
            "propertyNames": {"anyOf": [{"enum": sorted(_every_variable())}, {"not": {"pattern": refused}}]},
        },
    )


def _every_variable() -> set[str]:
    """What some pi-dispatch process reads or sets: the worker's, the receiver's, and the job's own variables."""
    models = (WorkerSettings, RECEIVER_MODEL, ConsoleSettings)
    return {str(info.validation_alias) for model in models for info in model.model_fields.values()} | set(JOB_VARIABLES)


def worker_env_schema() -> dict[str, Any]:
    return env_schema(
        WorkerSettings,
        "worker-env",
        "pi-dispatch worker environment",
        "Every variable the worker reads, as the strings they are in a systemd EnvironmentFile.",
    )


def receiver_env_schema() -> dict[str, Any]:
    return env_schema(
        RECEIVER_MODEL,
        "receiver-env",
        "pi-dispatch receiver environment",
        "Every variable the webhook receiver reads, as the strings they are in a systemd EnvironmentFile. Which "
        "forges are served follows from which are set; see docs/multi-host.md.",
    )


def console_env_schema() -> dict[str, Any]:
    return env_schema(
        ConsoleSettings,
        "console-env",
        "pi-dispatch console environment",
        "Every variable the web console reads, as the strings they are in a systemd EnvironmentFile (0600: it holds "
        "the logins' token hashes).",
    )


def host_vars_schema() -> dict[str, Any]:
    """What an inventory host declares for its worker and for the role that installs it."""
    declared: list[tuple[str, FieldInfo, str | None]] = [
        (variable, info, f"{info.validation_alias}: {info.description}")
        for name, info in WorkerSettings.model_fields.items()
        if (variable := host_variable(name, info)) is not None
    ]
    declared += [(str(info.validation_alias), info, info.description) for info in RoleVars.model_fields.values()]
    properties = {
        variable: _property(info, form_of(info).host_schema(bounds_of(info)), description)
        for variable, info, description in declared
    }
    return _document(
        "host-vars",
        "pi-dispatch inventory host variables",
        "What an inventory host declares for its worker. Other variables (ansible_host, ...) pass through; an "
        f"unknown {PREFIX} variable is refused, since it is almost always a typo.",
        {
            "properties": properties,
            "propertyNames": {"anyOf": [{"enum": sorted(properties)}, {"not": {"pattern": f"^{PREFIX}"}}]},
        },
    )


def generated(name: str) -> str:
    """A generated schema's text, exactly as it is committed under schemas/."""
    builders = {
        "worker-env": worker_env_schema,
        "host-vars": host_vars_schema,
        "receiver-env": receiver_env_schema,
        "console-env": console_env_schema,
    }
    schema = builders[name]()
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"
