"""`pi-dispatch hosts`, `runs` and `top`: the fleet's registry, its run history and its live view."""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from pi_dispatch.cli.common import JsonOption, ValkeyUrlOption, console, errors, print_json
from pi_dispatch.console.since import since_epoch_ms
from pi_dispatch.core.errors import ExitStatus
from pi_dispatch.fleet.registry import Unreachable


def top(
    url: ValkeyUrlOption = None,
    once: Annotated[
        bool, typer.Option("--once", help="Print one frame and exit (1 when Valkey is unreachable).")
    ] = False,
    rows: Annotated[
        int,
        typer.Option("--rows", min=0, help="At most this many hosts and queues, those needing a look first (0: all)."),
    ] = 40,
    as_json: Annotated[bool, typer.Option("--json", help="Print one frame as JSON (implies --once).")] = False,
) -> None:
    """The fleet live, about once a second: hosts, queues by state, the latest runs. q or Ctrl-C leaves; a pipe
    gets one frame, as with --once."""
    from pi_dispatch.cli.reads import store_address
    from pi_dispatch.console.top import watch
    from pi_dispatch.core.rehoming import rehome_after_ms

    raise typer.Exit(
        asyncio.run(
            watch(
                console,
                store_address(url),
                rehome_after_ms(None),
                once=once or not console.is_terminal,
                rows=rows,
                as_json=as_json,
            )
        )
    )


def hosts(
    url: ValkeyUrlOption = None,
    as_json: JsonOption = False,
    queues: Annotated[bool, typer.Option("--queues", help="With --json: the host queues instead of the rows.")] = False,
) -> None:
    """The live host registry (name, routes, caps, staleness, version, tz, free slots, and how many of the jobs
    waiting it could run) and each named host's queue."""
    from pi_dispatch.cli.reads import read_fleet, store_address
    from pi_dispatch.console.rowview import typed_row
    from pi_dispatch.console.tables import print_host_queues, print_hosts
    from pi_dispatch.core.rehoming import rehome_after_ms
    from pi_dispatch.fleet.backlog import runnable
    from pi_dispatch.infra.clock import wall_ms

    read = read_fleet(store_address(url))
    result, host_queues = read.live, read.host_queues
    if isinstance(result, Unreachable):
        errors.print(f"[red]registry unreachable[/red]: {escape(result.reason)}")
        raise typer.Exit(ExitStatus.FAILURE)
    after_ms, now_ms = rehome_after_ms(None), wall_ms()
    if as_json and queues:
        listed = [
            {**asdict(queue), "rehomeAt": queue.due_ms(after_ms), "rehomeAfterMs": after_ms} for queue in host_queues
        ]
        print_json(listed)
    elif as_json:
        could = runnable(result.hosts, read.waiting)  # beside the row's own fields, never one of them
        listed = [typed_row({**row, "couldRun": could.get(str(row.get("name")))}) for row in result.hosts]
        print_json(listed)
    else:
        print_hosts(console, result.hosts, result.invalid, runnable(result.hosts, read.waiting))
        if host_queues:
            print_host_queues(console, host_queues, after_ms, now_ms)
        if read.store is not None:
            console.print(read.store.summary(), markup=False, highlight=False)


def runs(
    limit: Annotated[int, typer.Option("--limit", min=1, max=5000, help="How many runs.")] = 50,
    host: Annotated[str | None, typer.Option("--host", help="Only runs of this worker.")] = None,
    job: Annotated[str | None, typer.Option("--job", help="Every attempt of this job, oldest first.")] = None,
    outcome: Annotated[
        str | None, typer.Option("--outcome", help="Only runs that ended so: completed, policy or failed.")
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            help="Only runs that ended since (ISO time or an age: 2h, 7d); with --json, each with its dollars.",
        ),
    ] = None,
    logs_dir: Annotated[
        Path | None, typer.Option("--logs-dir", help="This host's PI_LOGS_DIR (default: from settings).")
    ] = None,
    url: ValkeyUrlOption = None,
    as_json: JsonOption = False,
) -> None:
    """This host's run records merged with the fleet mirror, each labelled with its host; with --job, every attempt
    of one job."""
    from pi_dispatch.cli.job import logs_dir_of
    from pi_dispatch.cli.reads import job_attempts, merged_runs, store_address
    from pi_dispatch.console.tables import print_runs

    directory, since_ms = logs_dir_of(logs_dir), since_epoch_ms(since)
    if job is not None:
        found, degraded, skipped = job_attempts(directory, store_address(url), job), "ok", 0
    else:
        wanted = limit if host is None and outcome is None and since is None else 10 * limit
        found, degraded, skipped = merged_runs(directory, store_address(url), wanted, None)
    found = [run for run in found if (host is None or run.get("host") == host) and ended_since(run, since_ms)]
    found = [run for run in found if (outcome is None or run.get("outcome") == outcome)][: max(limit, 1)]
    unreachable = degraded.startswith("unreachable")
    if as_json:
        print_json({"degraded": degraded, "skipped": skipped, "runs": found})
    elif found or not unreachable:
        print_runs(console, found, degraded, skipped)
    if unreachable:  # this host's records alone, if any: shown, but not the fleet's answer
        errors.print(escape(f"error: the fleet mirror is {degraded}; fix: check --valkey-url and VALKEY_PASSWORD"))
        raise typer.Exit(ExitStatus.FAILURE)


def ended_since(run: object, since_ms: int) -> bool:
    """Whether a run record ended at or after `since_ms` (every run when 0; a record without a time, never)."""
    if not since_ms:
        return True
    ended = run.get("endedAt") if isinstance(run, dict) else None
    try:
        return isinstance(ended, str) and datetime.fromisoformat(ended).timestamp() * 1000 >= since_ms
    except ValueError:
        return False
