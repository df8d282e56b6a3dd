"""Cron patterns as BullMQ's parser reads them: a refusal names the field and why; next runs in a zone; and
`config triggers` says every problem of a file in one run, with line and column for bad JSON."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pi_dispatch.triggers.cronpatterns import next_runs, why_refused
from tests.support.helpers import run_cli


@pytest.mark.parametrize(
    ("pattern", "said"),
    [
        ("61 * * * *", "minute 61 is out of range 0-59"),
        ("* 25 * * *", "hour 25 is out of range 0-23"),
        ("0 0 32 * *", "day of month 32 is out of range 1-31"),
        ("0 0 * 13 *", "month 13 is out of range 1-12"),
        ("0 0 * * 8", "day of week 8 is out of range 0-7"),
        ("61 0 * * * *", "second 61 is out of range 0-59"),
        ("* * * * * * *", "has 7 fields"),
        ("*/0 * * * *", "minute '*/0' is not a value the field takes"),
    ],
)
def test_a_refused_pattern_names_its_field(pattern: str, said: str) -> None:
    assert (why_refused(pattern) or "").startswith(said)


@pytest.mark.parametrize("pattern", ["*/15 * * * *", "0 3 * * 1-5", "30 0 3 * * *", "0 0 1 jan *"])
def test_a_pattern_the_parser_reads_is_not_refused(pattern: str) -> None:
    assert why_refused(pattern) is None


def test_next_runs_are_in_the_zone_and_a_date_that_never_comes_gives_none() -> None:
    now = datetime(2026, 3, 28, 23, 0, tzinfo=UTC)  # the night Amsterdam moves to summer time
    runs = next_runs("0 3 * * *", "Europe/Amsterdam", now=now)
    assert [run.isoformat() for run in runs] == [
        "2026-03-29T03:00:00+02:00",
        "2026-03-30T03:00:00+02:00",
        "2026-03-31T03:00:00+02:00",
    ]
    assert next_runs("0 0 31 2 *", "UTC", now=now) == []


def cron(ident: str, pattern: str, **run: str) -> dict[str, object]:
    body = {"kind": "local", "folder": "/srv/app", "flow": "tidy", "task": "tidy up"} | run
    return {"on": {"type": "cron", "id": ident, "pattern": pattern}, "run": body}


def test_config_triggers_says_every_problem_in_one_run(tmp_path: Path) -> None:
    file = tmp_path / "triggers.json"
    broken = cron("a", "61 * * * *")
    del broken["run"]["folder"]  # type: ignore[attr-defined]
    entries = [broken, {"on": {"type": "label"}, "run": {"kind": "github", "flow": "fix"}}, cron("c", "* 25 * * *")]
    file.write_text(json.dumps({"triggers": entries}))
    result = run_cli("config", "triggers", str(file))
    assert result.returncode == 2
    said = [line.split(":")[0] for line in result.stderr.splitlines() if line.startswith("trigger ")]
    assert said == ["trigger 0 on.pattern", "trigger 0 run.folder", "trigger 1 on.any", "trigger 2 on.pattern"]
    assert "minute 61 is out of range 0-59" in result.stderr and "hour 25 is out of range 0-23" in result.stderr


def test_config_triggers_gives_line_and_column_of_bad_json(tmp_path: Path) -> None:
    file = tmp_path / "triggers.json"
    file.write_text('{"triggers": [\n  {"on": {}},\n]}\n')
    result = run_cli("config", "triggers", str(file), "--json")
    assert result.returncode == 2
    (problem,) = json.loads(result.stdout)["problems"]
    assert problem["message"].startswith("is not valid JSON at line 3, column 1")


def test_config_triggers_prints_each_cron_entry_next_three_runs(tmp_path: Path) -> None:
    file = tmp_path / "triggers.json"
    file.write_text(json.dumps({"triggers": [cron("tidy", "*/15 * * * *"), cron("never", "0 0 31 2 *")]}))
    result = run_cli("config", "triggers", str(file), "--tz", "Asia/Kolkata", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    tidy, never = report["cron"]
    assert tidy["zone"] == "Asia/Kolkata" and len(tidy["next"]) == 3
    assert all(run.endswith("+05:30") and run[14:16] in ("00", "15", "30", "45") for run in tidy["next"])
    assert never["next"] == []
    text = run_cli("config", "triggers", str(file), "--tz", "Asia/Kolkata")
    assert "cron tidy (*/15 * * * *, Asia/Kolkata): next " in text.stdout and "never (no date" in text.stdout
