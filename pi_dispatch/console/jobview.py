"""What `pi-dispatch job` and `logs` show: one job's whereabouts and attempts, and its output, terminal-safe."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pi_dispatch.console.output import show
from pi_dispatch.console.plaintext import plain
from pi_dispatch.console.rowview import run_usage
from pi_dispatch.console.terminal import keep_whole, output_text, visible
from pi_dispatch.fleet.jobhistory import Entry


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
