"""What `pi-dispatch job` and the web console's job page show of one job: its whereabouts, its attempts and its
route now, read in a bounded few round trips (`read_job_facts`) and shaped as `job --json` prints it (`job_facts`).
Free of the terminal's libraries: the console pays nothing for them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pi_dispatch.console.plaintext import plain
from pi_dispatch.core.capabilities import with_drains
from pi_dispatch.core.jscompat import iso_string
from pi_dispatch.core.names import record_stem
from pi_dispatch.core.routing import explain_route
from pi_dispatch.fleet.jobhistory import Entry, read_attempts, read_entries
from pi_dispatch.fleet.locate import Located, candidate_queues, locate
from pi_dispatch.fleet.registry import LiveHosts, read_live_hosts
from pi_dispatch.fleet.snapshot import read_drained
from pi_dispatch.worker.after.history import read_attempt_records


async def read_job_facts(client: Any, job_id: str, logs_dir: Path | None) -> dict[str, Any]:
    """Everything `job` (and the web console's job page) shows, as `job --json` prints it: its attempts from the
    store (else this host's own records in `logs_dir`), where it is now and its route, in a bounded few round trips."""
    stem = record_stem(job_id)
    history = await read_attempts(client, stem)
    if not history and logs_dir is not None:
        history = read_attempt_records(logs_dir, job_id)
    live = await read_live_hosts(client)
    drained = await read_drained(client)  # an operator's drain counts at once, as the router at enqueue counts it
    rows = live.hosts if isinstance(live, LiveHosts) else []
    rows = rows if drained is None else with_drains(rows, drained)
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
