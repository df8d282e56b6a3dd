"""The `pi-dispatch` app: the root, every command group registered, and `main`.

Exit codes: 0 ok, 1 findings or runtime failure, 2 usage or config error.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any, Final, NoReturn

import typer
import typer.main
from rich.markup import escape

from pi_dispatch import REFERENCE, __version__
from pi_dispatch.cli.actions import actions
from pi_dispatch.cli.audit import audit
from pi_dispatch.cli.common import console, errors
from pi_dispatch.cli.config import config_app
from pi_dispatch.cli.demo import demo
from pi_dispatch.cli.fleet import hosts, runs, top
from pi_dispatch.cli.job import job, logs
from pi_dispatch.cli.jobs import enqueue, route
from pi_dispatch.cli.jobs import run as run_local
from pi_dispatch.cli.limits import limits
from pi_dispatch.cli.receiver import init, receiver_app
from pi_dispatch.cli.rollout import rollout_app
from pi_dispatch.cli.steer import cancel, drain, resume, retry
from pi_dispatch.cli.webconsole import webconsole
from pi_dispatch.cli.worker import docker_proxy, egress_proxy, job_network, runtime_reap, worker
from pi_dispatch.core.errors import ConfigError, ExitStatus, PiDispatchError

app = typer.Typer(
    no_args_is_help=True,
    help="A fleet of pi workers sharing one Valkey. Shell completion: pi-dispatch --install-completion.",
)


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
app.command("job-network")(job_network)
app.command("egress-proxy")(egress_proxy)
app.command("runtime-reap")(runtime_reap)
app.command("docker-proxy")(docker_proxy)
app.add_typer(receiver_app, name="receiver")
app.add_typer(rollout_app, name="rollout")
app.command("init")(init)
app.command("audit")(audit)
app.command("top")(top)
app.add_typer(config_app, name="config")
app.command()(route)
app.command()(enqueue)
app.command(name="run")(run_local)
app.command()(hosts)
app.command()(limits)
app.command()(runs)
app.command()(job)
app.command()(logs)
app.command()(cancel)
app.command()(retry)
app.command()(drain)
app.command()(resume)
app.command()(actions)
app.command("console")(webconsole)


def report(error: PiDispatchError) -> NoReturn:
    """A refusal, said in one message without a traceback, and its exit status (2 for a config error)."""
    if isinstance(error, ConfigError):
        errors.print(f"[red]config error[/red]\n{escape(str(error))}")
    else:
        errors.print(f"[red]error[/red]: {escape(str(error))}")
    sys.exit(error.exit_code)


# One example per command, shown at the foot of its --help (a test holds every command to having one).
EXAMPLES: Final = {
    ("demo",): "pi-dispatch demo --keep",
    ("worker",): "pi-dispatch worker --env-file /etc/pi-dispatch/worker.env",
    ("job-network",): "pi-dispatch job-network --deny 203.0.113.7 --check",
    ("egress-proxy",): "pi-dispatch egress-proxy --env-file /etc/pi-dispatch/worker.env --check",
    ("runtime-reap",): "pi-dispatch runtime-reap",
    ("docker-proxy",): "pi-dispatch docker-proxy --socket /run/pi-dispatch-docker/docker.sock --jobs-dir /srv/jobs",
    ("receiver", "serve"): "pi-dispatch receiver serve --env-file /etc/pi-dispatch/receiver.env",
    ("receiver", "check"): "pi-dispatch receiver check --env-file /etc/pi-dispatch/receiver.env --json",
    ("rollout", "in-flight"): "pi-dispatch rollout in-flight -i inventory.example/ --host mini1",
    ("rollout", "gate"): "pi-dispatch rollout gate -i inventory.example/ --host mini1 --timeout 120",
    ("init",): "pi-dispatch init --triggers /etc/pi-dispatch-triggers/triggers.json",
    ("audit",): "pi-dispatch audit -i inventory.example/ --live --simulate-down mini1",
    ("top",): "pi-dispatch top --once --rows 0",
    ("config", "check"): "pi-dispatch config check --env-file /etc/pi-dispatch/worker.env --live",
    ("config", "triggers"): "pi-dispatch config triggers triggers.json --tz Europe/Amsterdam",
    ("config", "show"): "pi-dispatch config show --env-file /etc/pi-dispatch/worker.env",
    ("config", "render"): "pi-dispatch config render -i inventory.example/ --host mini1",
    ("config", "schema"): "pi-dispatch config schema --write schemas/",
    ("route",): "pi-dispatch route --job job.json --json",
    ("enqueue",): "pi-dispatch enqueue --job job.json --if-absent",
    ("run",): "pi-dispatch run /srv/app --task 'tidy the imports' --host mini1",
    ("hosts",): "pi-dispatch hosts --json | jq '.[] | {name, slotsFree}'",
    ("limits",): "pi-dispatch limits --env-file /etc/pi-dispatch/worker.env",
    ("runs",): "pi-dispatch runs --host mini1 --outcome failed",
    ("job",): "pi-dispatch job gh-2f1c…",
    ("logs",): "pi-dispatch logs gh-2f1c… --follow",
    ("cancel",): "pi-dispatch cancel gh-2f1c…",
    ("retry",): "pi-dispatch retry --failed --since 2h",
    ("drain",): "pi-dispatch drain mini1 --deadline 600",
    ("resume",): "pi-dispatch resume mini1",
    ("actions",): "pi-dispatch actions --limit 20",
    ("console",): "pi-dispatch console --env-file /etc/pi-dispatch/console.env --port 10480",
}


def _plain_metavars(command: Any, path: tuple[str, ...] = ()) -> None:
    """Each option's value named as a word (`--triggers FILE`), a flag's not at all, instead of the framework's
    type annotations (`<list[Path]>`, `<bool>`)."""
    help_option = command.get_help_option(command.context_class(command))  # built once and kept by the command
    for param in [*getattr(command, "params", []), *([help_option] if help_option is not None else [])]:
        if param.param_type_name == "argument":  # named by its metavar; its type column is the same noise
            param.metavar, param.display_type_rich = param.name.upper(), lambda ctx: None
            continue
        if param.metavar is not None or getattr(param, "is_flag", False) or not param.opts:
            param.metavar = "" if getattr(param, "is_flag", False) else param.metavar
            continue
        described = getattr(param, "type_descriptor", None)
        choices = described.choices if described is not None and described.is_choice else None
        if choices:
            param.metavar = "|".join(str(choice) for choice in choices)
        else:
            param.metavar = max(param.opts, key=len).lstrip("-").upper()
    if path in EXAMPLES:
        command.epilog = f"Example: {EXAMPLES[path]}"
    for name, sub in getattr(command, "commands", {}).items():
        _plain_metavars(sub, (*path, name))


def command() -> Any:
    """The click command typer builds from `app`, its help without type noise."""
    built = typer.main.get_command(app)
    _plain_metavars(built)
    return built


def main() -> None:
    try:
        command()(prog_name="pi-dispatch")
    except PiDispatchError as error:
        report(error)
