"""The `pi-dispatch` command line. Exit codes: 0 ok, 1 findings or runtime failure, 2 usage or config error."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from pi_dispatch import __version__
from pi_dispatch.errors import ConfigError, PiDispatchError

app = typer.Typer(no_args_is_help=True, add_completion=False, help="A fleet of pi workers sharing one Valkey.")
console = Console()
errors = Console(stderr=True, soft_wrap=True)


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False) -> None:
    if version:
        console.print(__version__)
        raise typer.Exit(0)


@app.command()
def demo() -> None:
    """Start a private Valkey, publish a small fleet, and show where sample jobs go and why."""
    from pi_dispatch import demo as demo_module

    raise typer.Exit(demo_module.main(console))


config_app = typer.Typer(no_args_is_help=True, help="Validate, show and render worker configuration.")
app.add_typer(config_app, name="config")
EnvFileOption = Annotated[
    Path | None, typer.Option("--env-file", help="Read this env file alone (systemd EnvironmentFile syntax).")
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


@config_app.command("check")
def config_check(env_file: EnvFileOption = None) -> None:
    """Validate the worker's configuration: prints OK or every problem; exit 0 or 2."""
    from pi_dispatch.settings import load_settings

    settings = load_settings(env_file)
    where = str(env_file) if env_file else "the environment"
    declared = "declared" if settings.worker_name_declared else "not declared, derived from the hostname"
    console.print(f"OK: {where} configures worker {settings.worker_name!r} ({declared})")


@config_app.command("show")
def config_show(env_file: EnvFileOption = None, as_json: JsonOption = False) -> None:
    """The effective settings and where each came from; secrets are redacted."""
    from pi_dispatch.settings import load_settings

    settings = load_settings(env_file)
    values = settings.model_dump(mode="json", exclude={"sources"})
    if settings.valkey_password is not None:
        values["valkey_password"] = "********"  # noqa: S105 - the redaction mark
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
    from pi_dispatch.inventory import find_host, load_inventory, render_host_env

    sys.stdout.write(render_host_env(find_host(load_inventory(inventory), host, str(inventory))))


def main() -> None:
    try:
        app()
    except ConfigError as error:
        errors.print(f"[red]config error[/red]\n{error}")
        sys.exit(2)
    except PiDispatchError as error:
        errors.print(f"[red]error[/red]: {error}")
        sys.exit(1)
