"""The operator's tables: an audit of a large fleet shows a few of each finding and says how many more."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from pi_dispatch.audit.findings import Finding, Report
from pi_dispatch.console.output import DRAWN_MAX
from pi_dispatch.console.tables import FINDINGS_PER_CODE, print_host_queues, print_hosts, print_report
from pi_dispatch.fleet.hosts import HostQueue, QueueCounts


def test_a_finding_on_hundreds_of_subjects_shows_a_few_and_counts_the_rest() -> None:
    findings = [
        Finding("queue-silent-host", f"queue pi-jobs@sim{number:04d}", "holds 1 waiting", "bring it back")
        for number in range(300)
    ]
    findings.append(Finding("host-silent", "host mini1", "silent for 90 s", "start it"))
    console = Console(width=200, record=True, file=io.StringIO())
    print_report(console, Report(findings, "ok", [], 301, 0))
    text = console.export_text()
    assert f"pi-jobs@sim{FINDINGS_PER_CODE - 1:04d}" in text and f"pi-jobs@sim{FINDINGS_PER_CODE:04d}" not in text
    assert f"{300 - FINDINGS_PER_CODE} more like the {FINDINGS_PER_CODE} above" in text
    assert "host mini1" in text and "WARNING (301)" in text  # every finding still counted
    assert "301 warning" in text


def test_the_host_queues_list_those_holding_jobs_or_of_silent_hosts_and_count_the_empty_ones() -> None:
    now = 1_800_000_000_000
    queues = [HostQueue(f"pi-jobs@idle{number:03d}", f"idle{number:03d}", QueueCounts(), None) for number in range(50)]
    queues += [
        HostQueue("pi-jobs@busy", "busy", QueueCounts(waiting=2), None),
        HostQueue("pi-jobs@gone", "gone", QueueCounts(), now - 60_000),
    ]
    console = Console(width=200, record=True, file=io.StringIO())
    print_host_queues(console, queues, 120_000, now)
    text = console.export_text()
    assert "pi-jobs@busy" in text and "pi-jobs@gone" in text and "pi-jobs@idle" not in text
    assert "Host queues (52, 50 of live hosts empty)" in text


def test_a_run_table_through_a_pipe_keeps_ids_and_timestamps_whole() -> None:
    from pi_dispatch.console.tables import print_runs

    job_id = "gh-22222222-2222-2222-2222-222222222222"
    runs = [
        {"endedAt": "2026-12-01T08:15:22.123Z", "jobId": job_id, "host": "pi-host-with-a-long-name", "kind": "github",
         "outcome": "completed", "reason": "a prose reason that may wrap as it likes in a narrow table"},
    ]  # fmt: skip
    console = Console(width=80, record=True, file=io.StringIO())
    print_runs(console, runs, "ok")
    text = console.export_text()
    for identifier in (job_id, "2026-12-01T08:15:22.123Z", "pi-host-with-a-long-name", "completed"):
        assert identifier in text, identifier


def _hosts(count: int) -> list[dict[str, object]]:
    return [
        {"name": f"sim{n:05d}-of-a-long-name", "routes": "true", "caps": "s:prod,w:ci", "staleMs": 13_000,
         "version": "0.1.0", "tz": "Europe/Amsterdam", "concurrency": "2", "slotsFree": "1"}
        for n in range(count)
    ]  # fmt: skip


@pytest.mark.parametrize(("count", "boxed"), [(3, True), (DRAWN_MAX + 1, False)])
def test_the_hosts_on_a_narrow_terminal_keep_every_name_whole_and_a_long_listing_is_plain(
    count: int, boxed: bool
) -> None:
    console = Console(width=60, file=io.StringIO(), force_terminal=True, color_system=None)
    print_hosts(console, _hosts(count))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert ("│" in text) is boxed
    words = set(re.split(r"[\s│]+", text))
    assert {f"sim{n:05d}-of-a-long-name" for n in range(count)} <= words
    assert {"Europe/Amsterdam", "s:prod,w:ci", "concurrency", "could"} <= words  # headers and values never cut
    assert "13 s" in text  # a short value never wraps


def test_through_a_pipe_the_hosts_are_one_line_each_split_by_two_spaces() -> None:
    console = Console(width=40, file=io.StringIO())
    print_hosts(console, _hosts(2), could_run={"sim00001-of-a-long-name": 3})
    lines = console.file.getvalue().splitlines()  # type: ignore[attr-defined]
    assert lines[0] == "Live registry (2 hosts)" and len(lines) == 4
    assert [re.split(r"\s{2,}", line) for line in lines[2:]][1] == [
        "sim00001-of-a-long-name", "true", "s:prod,w:ci", "13 s", "0.1.0", "Europe/Amsterdam", "2", "1", "3"
    ]  # fmt: skip
