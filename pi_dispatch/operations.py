"""The operator commands' I/O: read the registry and the mirror once, bounded, and render what they say."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from redis.exceptions import RedisError
from rich.console import Console
from rich.table import Table
from rich.text import Text

from pi_dispatch.audit import SEVERITIES, Report
from pi_dispatch.clock import wall_ms
from pi_dispatch.display import plain, visible
from pi_dispatch.errors import PiDispatchError
from pi_dispatch.fleet import FleetHost, HostQueue
from pi_dispatch.history import read_records_counted
from pi_dispatch.jscompat import iso_string
from pi_dispatch.mirror import MirroredRuns, hosts_in, merge_runs, read_mirrored_runs
from pi_dispatch.registry import InvalidRow, LiveHosts, Unreachable, read_live_hosts
from pi_dispatch.rehome import read_host_queues
from pi_dispatch.valkey import DEFAULT_VALKEY_URL, connect, describe, with_password

STYLE = {"error": "red", "warning": "yellow", "info": "green"}


def valkey_url(option: str | None) -> str:
    """--valkey-url, else VALKEY_URL, else the default. The password only ever comes from VALKEY_PASSWORD."""
    return option or os.environ.get("VALKEY_URL") or DEFAULT_VALKEY_URL


async def _with_client(url: str, use: Callable[[Any], Any]) -> Any:
    client = connect(url, os.environ.get("VALKEY_PASSWORD") or None)
    try:
        return await use(client)
    finally:
        await client.aclose()


def read_registry(url: str) -> LiveHosts | Unreachable:
    return asyncio.run(_with_client(url, read_live_hosts))  # type: ignore[no-any-return]


async def _fleet(client: Any) -> tuple[LiveHosts | Unreachable, list[HostQueue]]:
    live = await read_live_hosts(client)
    if not isinstance(live, LiveHosts):
        return live, []
    try:
        return live, await read_host_queues(client, live.hosts, wall_ms())
    except (RedisError, OSError, TimeoutError):
        return live, []


def read_fleet(url: str) -> tuple[LiveHosts | Unreachable, list[HostQueue]]:
    """The registry, and each named host's queue with since when its host is silent (empty when unreadable)."""
    return asyncio.run(_with_client(url, _fleet))  # type: ignore[no-any-return]


def read_mirror(url: str, limit: int) -> MirroredRuns:
    return asyncio.run(_with_client(url, lambda client: read_mirrored_runs(client, limit=limit)))  # type: ignore[no-any-return]


def enqueue_job(url: str, kind: str, data: dict[str, Any]) -> tuple[str, str, str]:
    """Route and add one forge job; returns (queue, job id, why). A bad delivery is a ConfigError."""
    from pi_dispatch.capabilities import explain_route
    from pi_dispatch.enqueue import Enqueuer, ForgeRouter, registry_reader
    from pi_dispatch.errors import ConfigError, Problem
    from pi_dispatch.jobs import JobIdError

    async def run(client: Any) -> tuple[str, str, str]:
        router = ForgeRouter(registry_reader(client))
        enqueuer = Enqueuer(with_password(url, os.environ.get("VALKEY_PASSWORD")), router)
        try:
            enqueued = await enqueuer.enqueue_forge_job(kind, data)
        finally:
            await enqueuer.close()
        queue, job_id = enqueued.queue, enqueued.job_id
        if enqueued.deduplicated:
            return queue, job_id, f"a duplicate of {enqueued.kept} (same target and flow within 10 minutes): not added"
        snapshot = await read_live_hosts(client)
        hosts = snapshot.hosts if isinstance(snapshot, LiveHosts) else []
        explanation = explain_route(hosts, data, job_id)
        if explanation.host is not None:
            return (
                queue,
                job_id,
                f"needs {', '.join(explanation.needs)}; chosen by job-id hash among the capable named hosts",
            )
        return queue, job_id, str(explanation.abstention)

    try:
        return asyncio.run(_with_client(url, run))  # type: ignore[no-any-return]
    except JobIdError as error:
        raise ConfigError([Problem("job", str(error), kind, "give the job data a trigger.deliveryId")]) from error
    except (RedisError, OSError, TimeoutError) as error:
        raise PiDispatchError(f"the job was not enqueued: Valkey said {describe(error)}") from error


def print_report(console: Console, report: Report) -> None:
    if not report.findings:
        console.print("[green]No findings.[/green]")
    for severity in SEVERITIES:
        rows = [finding for finding in report.findings if finding.severity == severity]
        if not rows:
            continue
        table = Table(
            title=f"{severity.upper()} ({len(rows)})", title_style=STYLE[severity], show_lines=True, expand=True
        )
        table.add_column("code", no_wrap=True)
        for column, ratio in (("subject", 3), ("finding", 5), ("fix", 4)):
            table.add_column(column, ratio=ratio, overflow="fold")
        for finding in rows:
            code = finding.code + (" (accepted)" if finding.code in report.accepted else "")
            table.add_row(
                *(visible(text, 2_000) for text in (code, finding.subject, finding.message)),
                visible(finding.fix or "-", 2_000),
            )
        console.print(table)
    if report.accepted:
        console.print(visible(f"accepted on purpose, not counted: {', '.join(sorted(report.accepted))}", 2_000))
    summary = ", ".join(f"{report.count(severity)} {severity}" for severity in SEVERITIES)
    down = f"; simulated down: {', '.join(report.simulated_down)}" if report.simulated_down else ""
    console.print(
        visible(
            f"{report.hosts} hosts, {report.triggers} triggers, live registry: {report.live}{down} -> {summary}", 2_000
        )
    )


def print_hosts(console: Console, hosts: list[dict[str, object]], invalid: list[InvalidRow] | None = None) -> None:
    """The registry as every router reads it: the routes flag and the capability tokens a peer honours; and the
    rows nobody routes to, with why."""
    table = Table(title=f"Live registry ({len(hosts)} hosts)")
    for column in ("name", "routes", "caps", "stale", "version", "tz", "concurrency"):
        table.add_column(column)
    for host in hosts:
        stale = host.get("staleMs")
        seen = FleetHost.of_row(host)
        table.add_row(
            visible(seen.name),
            visible(seen.routes),
            visible(seen.caps or "-"),
            visible(f"{int(stale) / 1000:.0f} s" if isinstance(stale, int) else "undatable"),
            *(visible(host.get(field, "")) for field in ("version", "tz", "concurrency")),
        )
    console.print(table)
    if invalid:
        refused = Table(title=f"Invalid rows ({len(invalid)}): never routed to")
        refused.add_column("registry entry")
        refused.add_column("why")
        for row in invalid:
            refused.add_row(visible(row.member), visible(row.reason))
        console.print(refused)


def print_host_queues(console: Console, queues: list[HostQueue], after_ms: int, now_ms: int) -> None:
    """Each named host's queue: what it holds, and when its jobs move if its host is silent."""
    table = Table(
        title=f"Host queues ({len(queues)}); a silent host's jobs move to the live fleet after {after_ms // 1000} s"
    )
    for column in ("queue", "jobs", "host", "re-homed"):
        table.add_column(column)
    for queue in queues:
        due = queue.due_ms(after_ms)
        if queue.silent_since_ms is None or due is None:
            host, when = "live", "-"
        else:
            host = f"silent since {iso_string(queue.silent_since_ms)}"
            when = "due now" if due <= now_ms else f"at {iso_string(due)} (in {(due - now_ms) // 1000} s)"
        table.add_row(visible(queue.queue), visible(queue.counts.describe()), visible(host), visible(when))
    console.print(table)


def merged_runs(logs_dir: Path, url: str, limit: int, host: str | None) -> tuple[list[Any], str, int]:
    """This host's record files merged with the fleet mirror, how far to trust the mirror, and how many records
    were skipped as unreadable."""
    mirrored = read_mirror(url, limit)
    local, skipped = read_records_counted(logs_dir)
    runs = merge_runs(local, mirrored.runs, limit=limit if host is None else 10 * limit)
    if host is not None:
        runs = [run for run in runs if run.get("host") == host][:limit]
    return runs, mirrored.degraded, skipped + mirrored.skipped


def print_runs(console: Console, runs: list[Any], degraded: str, skipped: int = 0) -> None:
    title = (
        "RUNS · this host only"
        if degraded.startswith("unreachable")
        else f"RUNS · fleet ({', '.join(plain(name) for name in hosts_in(runs)) or 'none'})"
    )
    table = Table(title=Text(plain(f"{title} · mirror {degraded}", 2_000)))
    for column in ("ended", "job id", "host", "kind", "outcome", "reason"):
        table.add_column(column)
    for run in runs:
        if not isinstance(run, dict):
            skipped += 1
            continue
        table.add_row(
            visible(run.get("endedAt") or run.get("startedAt") or "?"),
            visible(run.get("jobId")),
            visible(run.get("host") or "?"),
            visible(run.get("kind") or ""),
            visible(run.get("outcome") or ""),
            visible(run.get("reason") or "-"),
        )
    console.print(table)
    if skipped:
        console.print(f"{skipped} malformed records skipped")
