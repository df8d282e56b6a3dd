"""What the operator commands print: the audit report, the hosts, their queues and the runs, as text, never markup."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from pi_dispatch.audit.placement import SEVERITIES, Report
from pi_dispatch.console.output import Rows, show, show_rows
from pi_dispatch.console.plaintext import plain
from pi_dispatch.console.rowview import clock_note, run_usage
from pi_dispatch.console.terminal import keep_whole, visible
from pi_dispatch.core.capabilities import is_draining, unhealthy_reason
from pi_dispatch.core.jscompat import iso_string
from pi_dispatch.fleet.backlog import shown_count
from pi_dispatch.fleet.hosts import FleetHost, HostQueue
from pi_dispatch.fleet.mirror import hosts_in
from pi_dispatch.fleet.registry import InvalidRow

STYLE = {"error": "red", "warning": "yellow", "info": "green"}
# A fleet of thousands can have a finding per host: the table shows this many of each code, and says how many more.
FINDINGS_PER_CODE = 10


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
        shown: Counter[str] = Counter()
        for finding in rows:
            shown[finding.code] += 1
            if shown[finding.code] > FINDINGS_PER_CODE:
                continue
            code = finding.code + (" (accepted)" if finding.code in report.accepted else "")
            table.add_row(
                *(visible(text, 2_000) for text in (code, finding.subject, finding.message)),
                visible(finding.fix or "-", 2_000),
            )
        for code, count in shown.items():
            if count > FINDINGS_PER_CODE:
                more = f"{count - FINDINGS_PER_CODE} more like the {FINDINGS_PER_CODE} above"
                table.add_row(
                    visible(code, 2_000),
                    Text(more),
                    Text("the same finding on other subjects"),
                    Text("--json lists every one"),
                )
        show(console, keep_whole(table, "code"))
    if report.accepted:
        console.print(visible(f"accepted on purpose, not counted: {', '.join(sorted(report.accepted))}", 2_000))
    summary = ", ".join(f"{report.count(severity)} {severity}" for severity in SEVERITIES)
    down = f"; simulated down: {', '.join(report.simulated_down)}" if report.simulated_down else ""
    console.print(
        visible(
            f"{report.hosts} hosts, {report.triggers} triggers, live registry: {report.live}{down} -> {summary}", 2_000
        )
    )


def print_hosts(
    console: Console,
    hosts: list[dict[str, object]],
    invalid: list[InvalidRow] | None = None,
    could_run: Mapping[str, int] | None = None,
) -> None:
    """The registry as every router reads it: the routes flag and the capability tokens a peer honours, the free
    slots and how many waiting jobs each host could run (`fleet/backlog.py`); and the rows nobody routes to."""
    table = Rows(
        f"Live registry ({len(hosts)} hosts)",
        ("name", "routes", "caps", "stale", "version", "tz", "concurrency", "free", "could run"),
        whole=("name", "caps", "version", "tz"),
        right=("concurrency", "free", "could run"),
    )
    for host in hosts:
        stale = host.get("staleMs")
        seen = FleetHost.of_row(host)
        table.add(
            seen.name,
            _routes(host, seen.routes),
            seen.caps or "-",
            (f"{int(stale) / 1000:.0f} s" if isinstance(stale, int) else "undatable") + clock_note(host),
            *(host.get(field, "") for field in ("version", "tz", "concurrency", "slotsFree")),
            shown_count((could_run or {}).get(seen.name)),
        )
    show_rows(console, table)
    if invalid:
        refused = Rows(
            f"Invalid rows ({len(invalid)}): never routed to", ("registry entry", "why"), whole=("registry entry",)
        )
        for row in invalid:
            refused.add(row.member, row.reason)
        show_rows(console, refused)


def _routes(host: Mapping[str, object], routes: str) -> str:
    """The routes flag, and why a live host takes nothing now: drained, or unhealthy and why."""
    if is_draining(host):
        return f"{routes} (draining)"
    reason = unhealthy_reason(host)
    return f"{routes} (unhealthy: {reason})" if reason else routes


def print_host_queues(console: Console, queues: list[HostQueue], after_ms: int, now_ms: int) -> None:
    """Each named host's queue that holds a job or whose host is silent: what it holds, and when its jobs move if
    its host is silent. A live host's empty queue is counted, not listed (a fleet of thousands has thousands)."""
    listed = [
        queue for queue in queues if queue.counts.total + queue.counts.failed > 0 or queue.silent_since_ms is not None
    ]
    empty = f", {len(queues) - len(listed)} of live hosts empty" if len(listed) < len(queues) else ""
    table = Rows(
        f"Host queues ({len(queues)}{empty}); a silent host's jobs move to the live fleet after {after_ms // 1000} s",
        ("queue", "jobs", "host", "re-homed"),
        whole=("queue",),
    )
    for queue in listed:
        due = queue.due_ms(after_ms)
        if queue.silent_since_ms is None or due is None:
            host, when = "live", "-"
        else:
            host = f"silent since {iso_string(queue.silent_since_ms)}"
            when = "due now" if due <= now_ms else f"at {iso_string(due)} (in {(due - now_ms) // 1000} s)"
        table.add(queue.queue, queue.counts.describe(), host, when)
    show_rows(console, table)


def print_runs(console: Console, runs: list[Any], degraded: str, skipped: int = 0) -> None:
    title = (
        "RUNS · this host only"
        if degraded.startswith("unreachable")
        else f"RUNS · fleet ({', '.join(plain(name) for name in hosts_in(runs)) or 'none'})"
    )
    columns = ("ended", "job id", "host", "kind", "outcome", "reason", "used")
    table = Rows(plain(f"{title} · mirror {degraded}", 2_000), columns, whole=columns)
    for run in runs:
        if not isinstance(run, dict):
            skipped += 1
            continue
        table.add(
            run.get("endedAt") or run.get("startedAt") or "?",
            run.get("jobId"),
            run.get("host") or "?",
            run.get("kind") or "",
            run.get("outcome") or "",
            run.get("reason") or "-",
            run_usage(run),
        )
    show_rows(console, table)
    if skipped:
        console.print(f"{skipped} malformed records skipped")
