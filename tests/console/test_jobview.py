"""What `job` shows, from facts handed in: where the job is, its hold, its host, its route, its attempts."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from pi_dispatch.console.jobfacts import job_facts
from pi_dispatch.console.jobview import print_job
from pi_dispatch.fleet.jobhistory import Entry
from pi_dispatch.fleet.locate import Located

NOW = 1_800_000_000_000


def located(state: str, **changes: Any) -> Located:
    fields: dict[str, Any] = {
        "job_id": "gh-d-1",
        "queue": "pi-jobs@mini1",
        "state": state,
        "name": "github",
        "data": {"kind": "github", "secretsProfile": "prod", "secrets": {"T": "x"}},
        "opts": {"attempts": 2},
        "attempts_made": 1,
        "created_ms": NOW - 60_000,
        "processed_ms": None,
        "finished_ms": None,
        "failed_reason": None,
        "returned": None,
        "due_ms": None,
        "locked": False,
    }
    return Located(**{**fields, **changes})


def shown(facts: dict[str, Any]) -> str:
    out = io.StringIO()
    print_job(Console(file=out, width=200), facts)
    return out.getvalue()


def test_a_held_job_says_what_it_waits_for_and_when_it_is_checked_next() -> None:
    data = {"kind": "github", "waitFor": [{"profile": "ci"}, {"after": "2027-01-01T00:00:00Z"}], "waitHold": {
        "since": NOW - 30_000, "checks": 2, "faults": 0, "checked": True}}  # fmt: skip
    facts = job_facts("gh-d-1", located("delayed", data=data, due_ms=NOW + 5_000), [], [], start=None, current=1)
    assert facts["held"]["for"] == ["profile ci", "after 2027-01-01T00:00:00Z"] and facts["held"]["checks"] == 2
    assert facts["attempts"] == {"made": 1, "allowed": 2, "left": 1}
    text = shown(facts)
    assert "held for profile ci, after 2027-01-01T00:00:00Z" in text and "2 checks so far" in text


def test_a_running_job_names_its_host_and_its_route_now() -> None:
    start = Entry("1-0", "start", {"host": "mini1", "at": "2027-01-01T00:00:00.000Z"})
    rows = [{"name": "mini1", "routes": "true", "caps": "s:prod", "staleMs": 1_000},
            {"name": "mini2", "routes": "true", "caps": "", "staleMs": 1_000}]  # fmt: skip
    facts = job_facts("gh-d-1", located("active", locked=True), [{"host": "mini2"}], rows, start=start, current=2)
    assert facts["running"] == {"host": "mini1", "since": "2027-01-01T00:00:00.000Z", "attempt": 2}
    assert facts["route"]["host"] == "mini1" and facts["route"]["needs"] == ["s:prod"]
    assert {host["name"]: host["reason"] for host in facts["route"]["hosts"]}["mini2"] == "lacks s:prod"
    assert "running on mini1 since 2027-01-01" in shown(facts)


def test_a_job_no_queue_holds_is_known_by_its_records_or_not_at_all() -> None:
    gone = job_facts("gh-d-1", None, [{"host": "mini1", "outcome": "completed"}], [], start=None, current=2)
    assert gone["found"] and gone["state"] == "gone" and "no longer in any queue" in shown(gone)
    unknown = job_facts("gh-x", None, [], [], start=None, current=1)
    assert not unknown["found"] and "no job gh-x" in shown(unknown)


def test_hostile_text_in_a_record_is_shown_as_text() -> None:
    history = [{"host": "\x1b[2Jmini1", "outcome": "[red]failed[/red]", "reason": "x"}]
    text = shown(job_facts("gh-d-1", None, history, [], start=None, current=2))
    assert "\x1b" not in text and "\\x1b[2Jmini1" in text and "[red]failed[/red]" in text


def test_each_attempt_says_which_queue_it_took_the_job_from_and_where_a_stolen_job_was_routed() -> None:
    history = [
        {"host": "mini1", "queue": "pi-jobs@mini1", "routedTo": None, "outcome": "failed"},
        {"host": "mini2", "queue": "pi-jobs@mini2", "routedTo": "pi-jobs@mini1", "outcome": "completed"},
    ]
    lines = shown(job_facts("gh-d-1", None, history, [], start=None, current=3)).splitlines()
    assert any("mini2" in line and "pi-jobs@mini2 (stolen from pi-jobs@mini1)" in line for line in lines), lines
    assert any("mini1" in line and "pi-jobs@mini1" in line and "stolen" not in line for line in lines), lines


def test_an_attempt_the_egress_proxy_refused_says_where_it_tried_to_go() -> None:
    refused = {"count": 3, "first": [{"host": "paste.example", "port": 443}, {"host": "\x1b[2Jevil", "port": 80}]}
    history = [
        {"host": "mini1", "queue": "pi-jobs", "outcome": "completed", "egressRefused": {"count": 0, "first": []}},
        {"host": "mini1", "queue": "pi-jobs", "outcome": "completed", "egressRefused": refused},
        {"host": "mini2", "queue": "pi-jobs", "outcome": "completed", "egressRefused": "not an object"},
    ]
    lines = shown(job_facts("gh-d-1", None, history, [], start=None, current=4)).splitlines()
    said = [line for line in lines if "egress proxy refused" in line]
    assert said == ["  attempt 2: the egress proxy refused 3: paste.example:443, \\x1b[2Jevil:80"], lines
