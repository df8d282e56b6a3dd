"""The `pi-dispatch` command line. Exit codes: 0 ok, 1 findings or runtime failure, 2 usage or config error."""

from __future__ import annotations

import sys

import typer
from rich.console import Console

from pi_dispatch import __version__
from pi_dispatch.errors import ConfigError, PiDispatchError

app = typer.Typer(no_args_is_help=True, add_completion=False, help="A fleet of pi workers sharing one Valkey.")
console = Console()
errors = Console(stderr=True)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", help="Print the version and exit.")) -> None:
    if version:
        console.print(__version__)
        raise typer.Exit(0)


@app.command()
def demo() -> None:
    """Start a private Valkey, publish a small fleet, and show where sample jobs go and why."""
    from pi_dispatch import demo as demo_module

    raise typer.Exit(demo_module.main(console))


def main() -> None:
    try:
        app()
    except ConfigError as error:
        errors.print(f"[red]config error[/red]\n{error}")
        sys.exit(2)
    except PiDispatchError as error:
        errors.print(f"[red]error[/red]: {error}")
        sys.exit(1)
