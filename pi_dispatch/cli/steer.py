"""`pi-dispatch cancel`, `retry`, `drain` and `resume`: steering jobs and hosts from any machine that reaches the store.

Exit codes: 0 done; 1 nothing was done (the job is finished, still on its way, or unknown; a host that is not in
the registry) or the store could not be reached; 2 bad input.
"""

from __future__ import annotations

import asyncio
import time
from typing import Annotated, Any

import typer
from rich.markup import escape

from pi_dispatch.cli.common import JsonOption, ValkeyUrlOption, console, errors, print_json
from pi_dispatch.cli.job import JobArgument
from pi_dispatch.cli.reads import run_store
from pi_dispatch.console.since import since_epoch_ms
from pi_dispatch.core.errors import ConfigError, ExitStatus, Problem
from pi_dispatch.core.names import WORKER_NAME_RE
from pi_dispatch.fleet.registry import LiveHosts, read_live_hosts
from pi_dispatch.infra.clock import wall_ms

HostArgument = Annotated[str, typer.Argument(help="The host's worker name, as `hosts` shows it.")]


async def _trail(client: Any, what: str, target: str, outcome: str) -> None:
    """The action in the fleet's trail, by this command's Unix user (`pi-dispatch actions` lists it)."""
    from pi_dispatch.fleet.trail import Action, record_action, unix_user

    await record_action(client, Action(wall_ms(), unix_user(), "cli", what, target, outcome))


def cancel(
    job_id: JobArgument,
    wait: Annotated[float, typer.Option("--wait", min=0, help="Seconds to wait for a running job to stop.")] = 15.0,
    url: ValkeyUrlOption = None,
) -> None:
    """Cancel a job wherever it is: a waiting or held one at once, a running one by its host (TERM, grace, KILL)."""
    from pi_dispatch.fleet.steer import cancel_job, queues_for

    async def run(client: Any) -> Any:
        done = await cancel_job(client, job_id, await queues_for(client, job_id), now=wall_ms, wait_s=wait)
        await _trail(client, "cancel", job_id, done.result)
        return done

    done = run_store(url, run)
    shown = escape(job_id)
    if done.result == "missing":
        errors.print(f"no job {shown} in any queue of the fleet: nothing to cancel")
        raise typer.Exit(ExitStatus.FAILURE)
    if done.result == "finished":
        errors.print(f"job {shown} has finished ({done.job.state}): nothing to cancel, nothing changed")
        raise typer.Exit(ExitStatus.FAILURE)
    if done.result == "pending":
        console.print(
            f"job {shown} is {done.was} and its host has not stopped it within {wait:.0f} s; the cancel is recorded, "
            "so it stops as soon as its host (or whichever host takes it next) meets it"
        )
        raise typer.Exit(ExitStatus.FAILURE)
    where = "its container stopped" if done.was == "running" else "it had not started"
    console.print(f"cancelled {shown} on {escape(done.job.queue)} ({where}) in {done.seconds:.1f} s")


def retry(
    job_id: Annotated[str | None, typer.Argument(help="The job to run again (or --failed for many).")] = None,
    failed: Annotated[bool, typer.Option("--failed", help="Every failed job (with --since and --host).")] = False,
    since: Annotated[
        str | None, typer.Option("--since", help="With --failed: only jobs that failed since (ISO time or `2h`).")
    ] = None,
    host: Annotated[
        str | None, typer.Option("--host", help="With --failed: only jobs whose last attempt ran there.")
    ] = None,
    url: ValkeyUrlOption = None,
    as_json: JsonOption = False,
) -> None:
    """Run a failed, refused, timed-out or cancelled job again, routed anew; its attempt history goes on."""

    from pi_dispatch.cli.reads import store_address
    from pi_dispatch.fleet.steer import failed_jobs, queues_for, retry_job

    if (job_id is None) == (not failed):
        raise ConfigError(
            [Problem("retry", "needs a job id or --failed, not both", "command line", "name one job, or pass --failed")]
        )
    store = store_address(url)
    since_ms = since_epoch_ms(since)

    async def run(client: Any) -> list[tuple[str, Any]]:
        if job_id is not None:
            done = [(job_id, await retry_job(client, store, job_id, await queues_for(client, job_id)))]
        else:
            found = await failed_jobs(client, await queues_for(client, None), since_ms=since_ms, host=host)
            done = [(each, await retry_job(client, store, each, [queue])) for each, queue in found]
        for each, result in done:
            await _trail(client, "retry", each, result.result)
        return done

    results = run_store(url, run)
    if as_json:
        shown = [{"jobId": each, "result": done.result, "queue": done.queue} for each, done in results]
        print_json(shown)
    for each, done in results if not as_json else []:
        _say_retried(each, done)
    if job_id is not None and results[0][1].result != "queued":
        raise typer.Exit(ExitStatus.FAILURE)


def _say_retried(job_id: str, done: Any) -> None:
    shown = escape(job_id)
    if done.result == "queued":
        console.print(f"retried {shown}: waiting on {escape(done.queue)}")
    elif done.result == "missing":
        errors.print(f"no job {shown} in any queue of the fleet: there is nothing to run again")
    elif done.result == "unfinished":
        state, queue = done.job.state, escape(done.job.queue)
        errors.print(f"job {shown} is still {state} on {queue}: retry needs it finished (cancel it first)")
    else:
        errors.print(f"job {shown} completed: there is nothing to run again")


def drain(
    host: HostArgument,
    deadline: Annotated[
        float | None,
        typer.Option("--deadline", min=0, help="Seconds after which its running jobs are stopped and put back."),
    ] = None,
    url: ValkeyUrlOption = None,
) -> None:
    """Take a host out of service: routers skip it, it takes nothing new, what waits on its queue moves to peers."""
    from pi_dispatch.fleet.control import Drain

    now = wall_ms()
    _steer_host(host, Drain(now, None if deadline is None else now + int(deadline * 1000)), url)


def resume(host: HostArgument, url: ValkeyUrlOption = None) -> None:
    """Put a drained host back in service."""
    _steer_host(host, None, url)


def _steer_host(host: str, drain: Any, url: str | None) -> None:
    from pi_dispatch.core.capabilities import is_draining
    from pi_dispatch.fleet.control import request_drain

    if WORKER_NAME_RE.fullmatch(host) is None:
        raise ConfigError([Problem(host, "is not a worker name", "command line", "use a name `hosts` shows")])

    async def run(client: Any) -> tuple[bool, bool]:
        live = await read_live_hosts(client)
        rows = {str(row.get("name")): row for row in live.hosts} if isinstance(live, LiveHosts) else {}
        await request_drain(client, host, drain)
        await _trail(client, "drain" if drain is not None else "resume", host, "recorded")
        deadline = time.monotonic() + 20  # a live worker says so within a moment; a beat at the latest
        while host in rows and time.monotonic() < deadline:
            live = await read_live_hosts(client)
            listed = live.hosts if isinstance(live, LiveHosts) else []
            row = next((row for row in listed if row.get("name") == host), None)
            if row is not None and is_draining(row) == (drain is not None):
                return True, True
            await asyncio.sleep(0.2)
        return host in rows, False

    known, acknowledged = run_store(url, run)
    verb = "draining" if drain is not None else "resumed"
    if acknowledged:
        console.print(f"{escape(host)}: {verb} (its row says so)")
    elif known:
        console.print(f"{escape(host)}: {verb} is recorded; its worker has not said so yet (it will at its next beat)")
    else:
        console.print(f"{escape(host)}: {verb} is recorded; no live worker has that name: it applies when one starts")
