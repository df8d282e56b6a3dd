"""What `pi-dispatch job` and `logs` show: one job's whereabouts and attempts, and its output, terminal-safe."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pi_dispatch.console.output import show
from pi_dispatch.console.rowview import run_usage
from pi_dispatch.console.terminal import keep_whole, output_text, plain, visible
from pi_dispatch.core.capabilities import explain_route
from pi_dispatch.core.jscompat import iso_string
from pi_dispatch.core.names import record_stem
from pi_dispatch.fleet.jobhistory import Entry, read_attempts, read_entries
from pi_dispatch.fleet.locate import Located, candidate_queues, locate
from pi_dispatch.fleet.registry import LiveHosts, read_live_hosts
from pi_dispatch.worker.history import read_attempt_records


async def read_job_facts(client: Any, job_id: str, logs_dir: Path | None) -> dict[str, Any]:
    """Everything `job` (and the web console's job page) shows, as `job --json` prints it: its attempts from the
    store (else this host's own records in `logs_dir`), where it is now and its route, in a bounded few round trips."""
    stem = record_stem(job_id)
    history = await read_attempts(client, stem)
    if not history and logs_dir is not None:
        history = read_attempt_records(logs_dir, job_id)
    live = await read_live_hosts(client)
    rows = live.hosts if isinstance(live, LiveHosts) else []
    found = await locate(client, job_id, candidate_queues(rows, [record.get("host") for record in history]))
    current = len(history) + 1
    start = await read_entries(client, stem, current, count=1) if found and found[0].state == "active" else []
    return job_facts(
        job_id, found[0] if found else None, history, rows, start=start[0] if start else None, current=current
    )


def _iso(ms: int | None) -> str | None:
    return iso_string(ms) if isinstance(ms, int) and ms > 0 else None


def job_facts(
    job_id: str,
    found: Located | None,
    history: Sequence[Mapping[str, Any]],
    rows: Sequence[Mapping[str, object]],
    *,
    start: Entry | None,
    current: int,
) -> dict[str, Any]:
    """The job as `job --json` prints it. Pure: everything read comes in."""
    facts: dict[str, Any] = {"jobId": job_id, "found": found is not None or bool(history), "history": list(history)}
    if found is None:
        return facts | {"queue": None, "state": "gone" if history else "unknown"}
    hold = found.hold
    made, allowed = found.attempts_made, found.attempts_allowed
    running = None
    if found.state == "active" and start is not None and start.kind == "start":
        running = {"host": start.fields.get("host"), "since": start.fields.get("at"), "attempt": current}
    facts |= {
        "queue": found.queue,
        "state": found.state,
        "name": found.name,
        "attempts": {"made": made, "allowed": allowed, "left": max(0, allowed - made)},
        "nextRunAt": _iso(found.due_ms),
        "pausedUntil": _iso(found.paused_until_ms),
        "held": None
        if hold is None
        else {
            "since": _iso(hold.since_ms),
            "checks": hold.checks,
            "faults": hold.faults,
            "for": _conditions(found.data),
        },
        "running": running,
        "createdAt": _iso(found.created_ms),
        "finishedAt": _iso(found.finished_ms),
        "outcome": found.outcome,
        "failedReason": found.failed_reason,
    }
    if isinstance(found.data, dict):
        explanation = explain_route(list(rows), found.data, job_id)
        facts["route"] = {
            "host": explanation.host,
            "needs": list(explanation.needs),
            "abstention": explanation.abstention,
            "hosts": [{"name": verdict.name, "reason": verdict.reason} for verdict in explanation.hosts],
        }
    return facts


def _conditions(data: object) -> list[str]:
    """What a held job waits for, by name: `profile <name>` or `after <instant>` (nothing else is shown)."""
    wait_for = data.get("waitFor") if isinstance(data, Mapping) else None
    shown = []
    for condition in wait_for if isinstance(wait_for, list) else []:
        if isinstance(condition, Mapping):
            shown += [f"{key} {plain(value)}" for key, value in condition.items() if key in ("profile", "after")]
    return shown


def print_job(console: Console, facts: Mapping[str, Any]) -> None:
    job_id = plain(facts["jobId"])
    if not facts["found"]:
        console.print(escape(f"no job {job_id}: it is in no queue of the fleet and no record names it"))
        return
    if facts.get("queue") is None:
        console.print(escape(f"job {job_id}: no longer in any queue (its records follow)"))
    else:
        console.print(escape(f"job {job_id} ({plain(facts.get('name'))}): {facts['state']} on {facts['queue']}"))
        attempts = facts["attempts"]
        console.print(escape(f"  attempts: {attempts['made']} made, {attempts['left']} left of {attempts['allowed']}"))
        if (held := facts.get("held")) is not None:
            since, checks, due = held["since"], held["checks"], facts["nextRunAt"]
            waiting = ", ".join(held["for"]) or "its wait conditions"
            console.print(escape(f"  held for {waiting} since {since}: {checks} checks so far, next at {due}"))
        elif facts.get("pausedUntil"):
            console.print(escape(f"  waits for a pause window (its scope's) until {facts['pausedUntil']}"))
        elif facts.get("nextRunAt"):
            console.print(escape(f"  next run (retry or delay) at {facts['nextRunAt']}"))
        if (running := facts.get("running")) is not None:
            console.print(escape(f"  running on {plain(running['host'])} since {plain(running['since'])}"))
        if facts.get("failedReason"):
            console.print(escape(f"  failed: {plain(facts['failedReason'])}"))
        if (route := facts.get("route")) is not None:
            where = f"pi-jobs@{route['host']}" if route["host"] else f"pi-jobs ({route['abstention']})"
            console.print(
                escape(f"  routed now: {where}; needs {', '.join(route['needs']) or 'nothing host-specific'}")
            )
    _print_history(console, facts["history"])


def _print_history(console: Console, history: Sequence[Mapping[str, Any]]) -> None:
    if not history:
        console.print("  no attempt recorded yet")
        return
    table = Table(title="attempts")
    for column in ("#", "host", "queue", "started", "ended", "outcome", "reason", "exit", "used"):
        table.add_column(column)
    for number, record in enumerate(history, start=1):
        routed = record.get("routedTo")
        queue = f"{plain(record.get('queue'))} (stolen from {plain(routed)})" if routed else record.get("queue")
        table.add_row(
            str(number),
            visible(record.get("host")),
            visible(queue or "-"),
            visible(record.get("startedAt")),
            visible(record.get("endedAt")),
            visible(record.get("outcome")),
            visible(record.get("reason")),
            visible(record.get("exitCode")),
            visible(run_usage(record)),
        )
    show(console, keep_whole(table, "host", "queue", "started", "ended", "outcome"))
    for number, record in enumerate(history, start=1):
        refused = record.get("egressRefused")
        if isinstance(refused, Mapping) and refused.get("count"):
            listed = refused.get("first")
            first = listed if isinstance(listed, list) else []
            where = ", ".join(
                f"{plain(one.get('host'))}:{plain(one.get('port'))}" for one in first if isinstance(one, Mapping)
            )
            console.print(escape(f"  attempt {number}: the egress proxy refused {plain(refused['count'])}: {where}"))


def print_output(data: bytes, tail: int | None) -> None:
    """Output as it was kept, its last `tail` lines only when asked; hidden characters made visible on a terminal."""
    if tail is not None:
        data = b"\n".join(data.splitlines()[-tail:]) + (b"\n" if data else b"")
    raw = getattr(sys.stdout, "buffer", None)
    if sys.stdout.isatty() or raw is None:
        sys.stdout.write(output_text(data) if sys.stdout.isatty() else data.decode("utf-8", "replace"))
    else:
        raw.write(data)  # a pipe gets the bytes as they were kept
    sys.stdout.flush()


def print_end(attempt: int, end: Entry) -> None:
    dropped = end.fields.get("dropped", "0")
    note = f"; {dropped} bytes past the store's cap were dropped" if dropped not in ("", "0") else ""
    sys.stderr.write(
        f"(attempt {attempt} ended at {end.fields.get('at', '?')}: {end.fields.get('bytes', '?')} bytes{note})\n"
    )
