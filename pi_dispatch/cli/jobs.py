"""`pi-dispatch route` and `enqueue`: where a forge job goes and why, and adding it there."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Final

import typer
from rich.markup import escape

from pi_dispatch.cli.common import JsonOption, ValkeyUrlOption, console, errors, print_json
from pi_dispatch.core.errors import ConfigError, ExitStatus, Problem
from pi_dispatch.core.forges import FORGES
from pi_dispatch.fleet.registry import Unreachable

KIND_HELP: Final = f"The forge: {', '.join(list(FORGES)[:-1])} or {list(FORGES)[-1]}."


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
    kind: Annotated[str, typer.Option("--kind", help=KIND_HELP)] = "github",
    if_absent: Annotated[
        bool, typer.Option("--if-absent", help="A job id that exists already is not an error (exit 0).")
    ] = False,
    url: ValkeyUrlOption = None,
    as_json: JsonOption = False,
) -> None:
    """Route a forge job and add it to its queue with the reference's options; say where it went and why. A job
    id that exists already is not added (exit 1; 0 with --if-absent), nor a duplicate within the dedup window."""
    from pi_dispatch.cli.reads import enqueue_job, store_address

    data = read_job_file(job)
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
