"""The PI_SECRET_PROFILES / PI_WAIT_PROFILES grammar (upstream-vectors §6.4)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pi_dispatch.core.profiles import parse_profiles, render_profiles


@pytest.mark.parametrize("raw", [None, "", "   "])
def test_unset_or_blank_is_empty(raw: str | None) -> None:
    parsed = parse_profiles(raw, "wait")
    assert parsed.table == {} and parsed.problems == []


@pytest.mark.parametrize(
    ("raw", "table"),
    [
        (
            "jira:/opt/pi/wait-jira.sh,ci:/opt/pi/wait-ci.sh",
            {"jira": "/opt/pi/wait-jira.sh", "ci": "/opt/pi/wait-ci.sh"},
        ),
        ("prod:C:\\pi\\resolve.cmd", {"prod": "C:\\pi\\resolve.cmd"}),
        ("a:/x,", {"a": "/x"}),
        (" a : /x ", {"a": "/x"}),
        ("unc:\\\\server\\share\\r.cmd", {"unc": "\\\\server\\share\\r.cmd"}),
    ],
)
def test_parses(raw: str, table: dict[str, str]) -> None:
    parsed = parse_profiles(raw, "secret")
    assert parsed.problems == []
    assert parsed.table == table


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ("noColon", "name:/absolute/path"),
        (":/x", "name:/absolute/path"),
        ("bad name:/x", "letters, digits, dot, dash and underscore"),
        ("a:/x,a:/y", "declares 'a' twice"),
        ("a:relative/path", "ABSOLUTE"),
        ("a:", "ABSOLUTE"),
    ],
)
def test_refuses_with_the_variable_named(raw: str, fragment: str) -> None:
    parsed = parse_profiles(raw, "secret", source="/etc/pi-dispatch/worker.env")
    assert len(parsed.problems) == 1
    message = str(parsed.problems[0])
    assert fragment in message
    assert "PI_SECRET_PROFILES" in message and "/etc/pi-dispatch/worker.env" in message


def test_every_problem_is_reported_and_wait_wording_differs() -> None:
    parsed = parse_profiles("ok:/x,bad name:/y,rel:z,ok:/w", "wait")
    assert parsed.table == {"ok": "/x"}
    assert len(parsed.problems) == 3
    assert all("PI_WAIT_PROFILES" in str(problem) for problem in parsed.problems)
    assert "check" in str(parsed.problems[1])


names = st.from_regex(r"[A-Za-z0-9._-]{1,12}", fullmatch=True)
paths = st.from_regex(r"/[A-Za-z0-9._/-]{0,20}", fullmatch=True).map(str.strip).filter(lambda p: p.startswith("/"))


@given(st.dictionaries(names, paths, max_size=8))
def test_render_then_parse_round_trips(table: dict[str, str]) -> None:
    parsed = parse_profiles(render_profiles(table), "secret")
    assert parsed.problems == []
    assert parsed.table == table
