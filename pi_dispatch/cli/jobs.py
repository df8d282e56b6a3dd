"""`pi-dispatch route` and `enqueue`: where a forge job goes and why, and adding it there."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Final

import typer
from rich.markup import escape

from pi_dispatch.cli.common import JsonOption, ValkeyUrlOption, console, errors, print_json
from pi_dispatch.core.errors import ConfigError, ExitStatus, Problem
from pi_dispatch.core.forges import FORGES
from pi_dispatch.core.jobs import LOCAL_KIND
from pi_dispatch.fleet.registry import Unreachable

KIND_HELP: Final = f"The forge: {', '.join(list(FORGES)[:-1])} or {list(FORGES)[-1]}."
HOST_FIX: Final = "name the worker host whose folder it is with --host (or set PI_WORKER_NAME)"
HostOption = Annotated[str | None, typer.Option("--host", help="A local job's host (default: PI_WORKER_NAME).")]


def read_job_file(path: Path) -> dict[str, object]:
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


def route(
    job: Annotated[
        Path, typer.Option("--job", help="A file holding the job's data as JSON (what the receiver would enqueue).")
    ],
    kind: Annotated[str, typer.Option("--kind", help=KIND_HELP)] = "github",
    offline: Annotated[
        bool,
        typer.Option("--offline", help="Decide without the store, as the router would with no live host."),
    ] = False,
    inventory: Annotated[
        Path | None, typer.Option("-i", "--inventory", help="Route against an inventory instead.")
    ] = None,
    url: ValkeyUrlOption = None,
    as_json: JsonOption = False,
) -> None:
    """Which queue this job would go to, and for every host why it was or was not chosen."""
    from pi_dispatch.cli.reads import read_registry, store_address
    from pi_dispatch.core.jobs import JobIdError, forge_delivery_job_id
    from pi_dispatch.core.keys import SHARED_QUEUE, host_queue_name
    from pi_dispatch.core.routing import explain_route
    from pi_dispatch.fleet.hosts import FleetHost, heartbeat_row, routing_view
    from pi_dispatch.fleet.inventory import load_inventory

    data = read_job_file(job)
    hosts: list[dict[str, object]] = []
    if inventory is not None:
        fleet = [FleetHost.of_inventory(host) for host in load_inventory(inventory)]
        hosts = [routing_view(host, heartbeat_row(host)) for host in fleet]
    elif not offline:
        result = read_registry(store_address(url))
        if isinstance(result, Unreachable):  # a decision without the registry is not the one the router would take
            errors.print(
                escape(
                    f"error: the registry could not be read ({result.reason}); fix: check --valkey-url "
                    "and VALKEY_PASSWORD, or pass --offline to decide without it"
                )
            )
            raise typer.Exit(ExitStatus.FAILURE)
        hosts = result.hosts
    trigger = data.get("trigger")
    try:
        job_id = forge_delivery_job_id(
            kind,
            trigger.get("deliveryId") if isinstance(trigger, dict) else None,
            data.get("replica"),
        )
    except JobIdError as error:
        if as_json:
            said = {"jobId": None, "queue": SHARED_QUEUE, "host": None, "abstention": f"not routable: {error}"}
            print_json(said | {"needs": [], "hosts": []})
        else:
            console.print(escape(f"queue: {SHARED_QUEUE} (not routable: {error})"))
        raise typer.Exit(ExitStatus.OK) from error
    explanation = explain_route(hosts, data, job_id)
    queue = host_queue_name(explanation.host) if explanation.host else SHARED_QUEUE
    if as_json:
        verdicts = [
            {"name": verdict.name, "chosen": verdict.chosen, "reason": verdict.reason} for verdict in explanation.hosts
        ]
        said = {"jobId": job_id, "queue": queue, "host": explanation.host, "abstention": explanation.abstention}
        print_json(said | {"needs": list(explanation.needs), "hosts": verdicts})
        return
    console.print(escape(f"job {job_id} needs {', '.join(explanation.needs) or 'nothing host-specific'}"))
    console.print(
        f"queue: [bold]{escape(queue)}[/bold]"
        + escape(f" ({explanation.abstention})" if explanation.abstention else "")
    )
    for verdict in explanation.hosts:
        console.print(escape(f"  {verdict.name}: {verdict.reason}"))


def enqueue(
    job: Annotated[
        Path, typer.Option("--job", help="A file holding the job's data as JSON (what the receiver would enqueue).")
    ],
    kind: Annotated[str, typer.Option("--kind", help=KIND_HELP + " local: a job on a host's own folder.")] = "github",
    host: HostOption = None,
    if_absent: Annotated[
        bool, typer.Option("--if-absent", help="A job id that exists already is not an error (exit 0).")
    ] = False,
    url: ValkeyUrlOption = None,
    as_json: JsonOption = False,
) -> None:
    """Route a forge job and add it to its queue with the reference's options; say where it went and why. A job
    id that exists already is not added (exit 1; 0 with --if-absent), nor a duplicate within the dedup window."""
    from pi_dispatch.cli.reads import enqueue_job, enqueue_local, store_address

    data = read_job_file(job)
    if kind == LOCAL_KIND or data.get("kind") == LOCAL_KIND:
        done = enqueue_local(store_address(url), local_host(host), local_job(data))
    else:
        done = enqueue_job(store_address(url), kind, data)
    if as_json:
        print_json(done.as_json())
    elif done.result == "added":
        console.print(f"enqueued {escape(done.job_id)} on [bold]{escape(done.queue)}[/bold]: {escape(done.why)}")
    elif done.result == "duplicate":
        console.print(escape(f"not added: duplicate of {done.duplicate_of}, kept on {done.queue} as {done.why}"))
    else:
        console.print(escape(f"not added: job {done.job_id} exists already on {done.queue} ({done.state})"))
    if done.result == "exists" and not if_absent:
        raise typer.Exit(ExitStatus.FAILURE)


def local_host(host: str | None) -> str:
    """The host a local job runs on: --host, else this machine's declared worker name."""
    named = host or os.environ.get("PI_WORKER_NAME", "")
    if not named:
        raise ConfigError([Problem("--host", "is required for a local job", "the command line", HOST_FIX)])
    return named


def local_job(data: dict[str, object]) -> dict[str, object]:
    """A local job's data, its folder resolved (the folder is the host's): refused when it is not a folder here."""
    folder = data.get("folder")
    if not isinstance(folder, str) or not Path(folder).is_absolute() or not Path(folder).is_dir():
        fix = "an absolute path to a git repository on this host"
        raise ConfigError([Problem("folder", "is not a folder on this host", "the job", fix)])
    task, flow, command = data.get("task"), data.get("flow"), data.get("command")
    if not any(isinstance(value, str) and value for value in (task, flow, command)):
        raise ConfigError([Problem("task", "is missing", "the job", "give the job a task, a flow or a command")])
    return {**data, "kind": LOCAL_KIND, "folder": str(Path(folder).resolve())}


def run(
    folder: Annotated[Path, typer.Argument(help="The host's folder the agent works in (a git repository).")],
    task: Annotated[str | None, typer.Option("--task", help="What the agent is asked to do.")] = None,
    flow: Annotated[str | None, typer.Option("--flow", help="The skill it follows (in the folder's .pi/).")] = None,
    host: HostOption = None,
    url: ValkeyUrlOption = None,
    as_json: JsonOption = False,
) -> None:
    """Enqueue a local job on a host's folder, as the reference's `run` does: the folder itself is the job's
    workspace, edited in place; the job goes to that host's queue."""
    from pi_dispatch.cli.reads import enqueue_local, store_address

    if task is None and flow is None:
        raise ConfigError([Problem("--task", "or --flow is required", "the command line", "say what to do")])
    data: dict[str, object] = {"kind": LOCAL_KIND, "folder": str(folder.absolute()), "task": task or ""}
    if flow is not None:
        data["flow"] = flow
    done = enqueue_local(store_address(url), local_host(host), local_job(data))
    if as_json:
        print_json(done.as_json())
    elif done.result == "added":
        console.print(f"enqueued {escape(done.job_id)} on [bold]{escape(done.queue)}[/bold]: {escape(done.why)}")
    else:
        console.print(escape(f"not added: job {done.job_id} exists already on {done.queue} ({done.state})"))
        raise typer.Exit(ExitStatus.FAILURE)
