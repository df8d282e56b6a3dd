"""The `pi-dispatch` app: the root, every command group registered, and `main`.

Exit codes: 0 ok, 1 findings or runtime failure, 2 usage or config error.
"""

from __future__ import annotations

import sys
from typing import Annotated, NoReturn

import typer
from rich.markup import escape

from pi_dispatch import REFERENCE, __version__
from pi_dispatch.cli.audit import audit
from pi_dispatch.cli.common import console, errors
from pi_dispatch.cli.config import config_app
from pi_dispatch.cli.demo import demo
from pi_dispatch.cli.fleet import hosts, runs, top
from pi_dispatch.cli.job import job, logs
from pi_dispatch.cli.jobs import enqueue, route
from pi_dispatch.cli.receiver import init, receiver_app
from pi_dispatch.cli.rollout import rollout_app
from pi_dispatch.cli.steer import cancel, drain, resume, retry
from pi_dispatch.cli.worker import worker
from pi_dispatch.core.errors import ConfigError, ExitStatus, PiDispatchError

app = typer.Typer(no_args_is_help=True, add_completion=False, help="A fleet of pi workers sharing one Valkey.")


def _print_version(asked: bool) -> None:
    if asked:  # eager: answered before typer asks for a command
        console.print(f"pi-dispatch {__version__} (wire-compatible with {REFERENCE})", highlight=False)
        raise typer.Exit(ExitStatus.OK)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print the version and the reference it is compatible with.",
            callback=_print_version,
            is_eager=True,
        ),
    ] = False,
) -> None:
    del version  # answered by its callback


# Registered in the order `--help` lists them; each command lives in the module of its group.
app.command()(demo)
app.command()(worker)
app.add_typer(receiver_app, name="receiver")
app.add_typer(rollout_app, name="rollout")
app.command("init")(init)
app.command("audit")(audit)
app.command("top")(top)
app.add_typer(config_app, name="config")
app.command()(route)
app.command()(enqueue)
app.command()(hosts)
app.command()(runs)
app.command()(job)
app.command()(logs)
app.command()(cancel)
app.command()(retry)
app.command()(drain)
app.command()(resume)


def report(error: PiDispatchError) -> NoReturn:
    """A refusal, said in one message without a traceback, and its exit status (2 for a config error)."""
    if isinstance(error, ConfigError):
        errors.print(f"[red]config error[/red]\n{escape(str(error))}")
    else:
        errors.print(f"[red]error[/red]: {escape(str(error))}")
    sys.exit(error.exit_code)


def main() -> None:
    try:
        app()
    except PiDispatchError as error:
        report(error)
