"""`pi-dispatch config check|triggers|show|render|schema`: the worker's configuration, validated, shown, rendered."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from pi_dispatch.cli.common import EnvFileOption, JsonOption, console, write_file
from pi_dispatch.core.errors import ConfigError, Problem

config_app = typer.Typer(no_args_is_help=True, help="Validate, show and render worker configuration.")


@config_app.command("check")
def config_check(env_file: EnvFileOption = None) -> None:
    """Validate the worker's configuration: prints OK or every problem; exit 0 or 2."""
    from pi_dispatch.config.worker_settings import load_settings
    from pi_dispatch.triggers.schedules import load_cron

    settings = load_settings(env_file)
    where = str(env_file) if env_file else "the environment"
    declared = "declared" if settings.worker_name_declared else "not declared, derived from the hostname"
    cron = "cron disabled"
    if settings.triggers_file is not None:
        _, triggers = load_cron(settings.triggers_file, "PI_TRIGGERS_FILE")
        cron = f"{sum(trigger.on_type == 'cron' for trigger in triggers)} cron entries"
    console.print(escape(f"OK: {where} configures worker {settings.worker_name!r} ({declared}; {cron})"))


@config_app.command("triggers")
def config_triggers(file: Annotated[Path, typer.Argument(help="The triggers file to check.")]) -> None:
    """Check a triggers file as the worker reads it (and the receiver, which reads the same format): exit 0 or 2."""
    from pi_dispatch.triggers.schedules import load_cron

    _, triggers = load_cron(file, str(file))
    cron = sum(trigger.on_type == "cron" for trigger in triggers)
    console.print(escape(f"OK: {file}: {len(triggers)} triggers, {cron} of them cron"))


@config_app.command("show")
def config_show(env_file: EnvFileOption = None, as_json: JsonOption = False) -> None:
    """The effective settings and where each came from; secrets are redacted."""
    from pi_dispatch.config.worker_settings import load_settings
    from pi_dispatch.infra.valkey import redacted

    settings = load_settings(env_file)
    values = settings.model_dump(mode="json", exclude={"sources"})
    if settings.valkey_password is not None:
        values["valkey_password"] = "********"  # noqa: S105 - the redaction mark
    values["valkey_url"] = redacted(settings.valkey_url)
    if as_json:
        console.print_json(data={"settings": values, "sources": settings.sources})
        return
    table = Table(title="pi-dispatch worker settings")
    for column in ("setting", "value", "source"):
        table.add_column(column)
    for key, value in values.items():
        shown = json.dumps(value) if isinstance(value, dict | list) else str(value)
        table.add_row(key, shown, settings.sources.get(key, "derived"))
    console.print(table)


@config_app.command("render")
def config_render(
    host: Annotated[str, typer.Option("--host", help="The inventory host to render.")],
    inventory: Annotated[Path, typer.Option("-i", "--inventory", help="The Ansible inventory file or directory.")],
) -> None:
    """Print the env file the host's worker should have, rendered from the inventory."""
    from pi_dispatch.config.hostvars import find_host, render_host_env
    from pi_dispatch.fleet.inventory import load_inventory

    sys.stdout.write(render_host_env(find_host(load_inventory(inventory), host, str(inventory))))


@config_app.command("schema")
def config_schema(
    name: Annotated[str | None, typer.Argument(help="worker-env or host-vars; both when left out.")] = None,
    write: Annotated[
        Path | None, typer.Option("--write", help="Write <name>.schema.json into this folder instead of printing.")
    ] = None,
) -> None:
    """The JSON Schemas generated from the settings declaration (the published contract under schemas/)."""
    from pi_dispatch.config.published import GENERATED, generated

    if name is not None and name not in GENERATED:
        raise ConfigError(
            [Problem(name, "is not a generated schema", "config schema", f"one of {', '.join(GENERATED)}")]
        )
    for each in [name] if name else GENERATED:
        if write is None:
            sys.stdout.write(generated(each))
        else:
            write_file(write / f"{each}.schema.json", generated(each), "--write")
            console.print(escape(f"wrote {write / f'{each}.schema.json'}"))
