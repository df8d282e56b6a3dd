"""`pi-dispatch rollout in-flight|gate`: what a host holds before its restart, and its health gate after.

The playbook's rolling play runs `in-flight` before a batch is touched and `gate` after each host's restart;
`gate` waits until the host is healthy (`rollout.verdict`) or its time is up, then exits 0, or 1 naming the
host and every reason, which stops the rollout.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from pi_dispatch.cli.common import ExtraVarsOption, ValkeyUrlOption, console, errors, extra_variables
from pi_dispatch.core.errors import ConfigError, ExitStatus, Problem
from pi_dispatch.infra.store import StoreAddress

rollout_app = typer.Typer(
    no_args_is_help=True,
    help="The per-host steps of the playbook's rolling upgrade: the jobs a host holds before its stop, and its health "
    "gate after. The rollout itself: ansible-playbook -i INVENTORY ansible/site.yml (docs/multi-host.md).",
)
POLL_S = 1.0


InventoryOption = Annotated[Path, typer.Option("-i", "--inventory", help="The Ansible inventory file or directory.")]
HostOption = Annotated[str, typer.Option("--host", help="The inventory host being rolled out.")]


def _expected(inventory: Path, host: str, extra_vars: str | None, version: str | None) -> Any:
    from pi_dispatch.audit.rollout import Expected
    from pi_dispatch.config.hostvars import find_host
    from pi_dispatch.fleet.inventory import load_inventory

    found = find_host(load_inventory(inventory, extra_variables(extra_vars)), host, str(inventory))
    return Expected.of(found, version)


@rollout_app.command("in-flight")
def in_flight(
    inventory: InventoryOption, host: HostOption, url: ValkeyUrlOption = None, extra_vars: ExtraVarsOption = None
) -> None:
    """The ids of the jobs active on the shared queue and the host's own, as JSON: what its stop must not lose."""
    from pi_dispatch.cli.reads import on_store, store_address
    from pi_dispatch.core.keys import SHARED_QUEUE, bull_key, host_queue_name
    from pi_dispatch.infra.valkey import bounded, reply_text

    worker = _expected(inventory, host, extra_vars, None).worker

    async def active(client: Any) -> list[str]:
        found: list[str] = []
        for queue in (SHARED_QUEUE, host_queue_name(worker)):
            found += map(reply_text, await bounded(client.lrange(bull_key(queue, "active"), 0, -1), 5))
        return sorted(set(found))

    sys.stdout.write(json.dumps(on_store(store_address(url), active)) + "\n")  # unreachable: one line, exit 1


async def _gate(store: StoreAddress, expected: Any, jobs: list[str], timeout_s: float) -> list[str]:
    from redis.exceptions import RedisError

    from pi_dispatch.audit.rollout import LOST, verdict
    from pi_dispatch.core.keys import SHARED_QUEUE, bull_key
    from pi_dispatch.fleet.registry import LiveHosts, read_live_hosts
    from pi_dispatch.fleet.rehome import host_queue_names
    from pi_dispatch.infra.clock import wall_ms
    from pi_dispatch.infra.valkey import bounded, describe

    client = store.client()
    since, deadline = wall_ms(), time.monotonic() + timeout_s
    try:
        while True:
            try:
                live = await read_live_hosts(client)
                rows = live.hosts if isinstance(live, LiveHosts) else []
                row = next((row for row in rows if row.get("name") == expected.worker), None)
                queues = [SHARED_QUEUE, *await host_queue_names(client)]
                states = {}
                for job_id in jobs:
                    held = [await bounded(client.exists(bull_key(queue, job_id)), 5) for queue in queues]
                    states[job_id] = "known" if any(held) else LOST
                problems = verdict(expected, row, states, since, wall_ms())
            except (RedisError, OSError, TimeoutError) as error:  # a store failing over: asked again until the end
                problems = [f"the store could not be read ({describe(error)})"]
            if not problems or time.monotonic() > deadline:
                return problems
            await asyncio.sleep(POLL_S)
    finally:
        await client.aclose()


@rollout_app.command("gate")
def gate(
    inventory: InventoryOption,
    host: HostOption,
    url: ValkeyUrlOption = None,
    version: Annotated[
        str | None, typer.Option("--version", help="The package version the rollout installed on it.")
    ] = None,
    in_flight_jobs: Annotated[
        str, typer.Option("--in-flight", help="`rollout in-flight`'s JSON from before its restart.")
    ] = "[]",
    timeout_s: Annotated[float, typer.Option("--timeout", help="Seconds to wait for it to be healthy.")] = 180.0,
    extra_vars: ExtraVarsOption = None,
) -> None:
    """Wait until the host is back as its inventory renders it, polling, with no in-flight job lost: exit 0, or
    exit 1 naming the host and every reason."""
    from pi_dispatch.cli.reads import store_address

    try:
        jobs = json.loads(in_flight_jobs)
    except ValueError:
        jobs = None
    if not isinstance(jobs, list) or not all(isinstance(job, str) for job in jobs):
        raise ConfigError([Problem("--in-flight", "is not a JSON list of job ids", "command line", "pass its output")])
    expected = _expected(inventory, host, extra_vars, version)
    problems = asyncio.run(_gate(store_address(url), expected, jobs, timeout_s))
    if problems:
        errors.print(escape(f"{host}: not healthy after {timeout_s:.0f} s: " + "; ".join(problems)))
        raise typer.Exit(ExitStatus.FAILURE)
    console.print(
        escape(
            f"{host}: healthy: worker {expected.worker!r} beats with caps {expected.caps or '(none)'!r}, "
            f"version {expected.version or 'as published'}, polling; {len(jobs)} in-flight jobs all in a queue"
        )
    )
