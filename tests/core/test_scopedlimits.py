"""The scoped limits file, version 1, read as the reference reads it (upstream-limits §4.1, §4.6)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pi_dispatch.core.budget import WindowCaps
from pi_dispatch.core.scopedlimits import (
    ScopedLimitsError,
    ScopeRow,
    concurrency_for,
    job_scope,
    parse_scoped_limits,
    read_scoped_limits,
)


def limits(*rows: object, version: object = 1) -> Any:
    return {"version": version, "limits": list(rows)}


def test_a_row_keeps_its_caps_and_drops_unknown_keys() -> None:
    parsed = parse_scoped_limits({**limits({"scope": "acme/web", "week": 40, "colour": "red"}), "extra": 1})
    assert parsed.rows == (ScopeRow("acme/web", WindowCaps(None, 40, None), None),)
    assert parse_scoped_limits(limits({"scope": "acme/web", "day": 1e3})).rows[0].caps.day == 1000


@pytest.mark.parametrize(
    "row",
    [
        {"scope": "acme/web"}, {"scope": "acme/web", "day": None}, {"scope": "acme/web", "day": 0},
        {"scope": "acme/web", "week": -1}, {"scope": "acme/web", "month": 1.5},
        {"scope": "acme/web", "concurrent": "2"},
        {"scope": "acme/web", "day": 2**53}, {"scope": "  ", "day": 1}, {"scope": "*", "day": 1},
        {"scope": "  *  ", "day": 1}, {"scope": "acme/*", "day": 1}, {"scope": "*/web", "day": 1},
        {"scope": "/srv/*", "day": 1}, {"scope": "acme/web", "day": True}, "acme/web",
    ],
)  # fmt: skip
def test_what_the_reference_refuses_is_refused(row: object) -> None:
    with pytest.raises(ScopedLimitsError):
        parse_scoped_limits(limits(row))


@pytest.mark.parametrize("raw", [{"limits": []}, limits(version=0), limits(version="1"), {"version": 1}, []])
def test_a_file_without_a_version_or_limits_is_refused(raw: object) -> None:
    with pytest.raises(ScopedLimitsError):
        parse_scoped_limits(raw)


def test_a_newer_version_is_refused_naming_both_versions() -> None:
    with pytest.raises(ScopedLimitsError, match=r"version 2: written by a newer .* reads version 1"):
        parse_scoped_limits(limits({"scope": "acme/web", "day": 1}, version=2))


def test_duplicates_are_refused_once_resolved() -> None:
    for first, second in (("acme/web", "acme/web"), ("/srv/site", "/srv/site/")):
        with pytest.raises(ScopedLimitsError, match="limited twice"):
            parse_scoped_limits(limits({"scope": first, "day": 1}, {"scope": second, "week": 1}))


def test_folder_rows_are_resolved_and_relative_ones_kept() -> None:
    rows = parse_scoped_limits(
        limits({"scope": "/srv/site/", "day": 1}, {"scope": "/srv/x/../other", "day": 1}, {"scope": "./site", "day": 1})
    ).rows
    assert [row.scope for row in rows] == ["/srv/site", "/srv/other", "./site"]


def test_a_scope_spelled_in_nfd_is_the_same_scope_on_both_sides() -> None:
    row = parse_scoped_limits(limits({"scope": "acme/cafe\u0301", "day": 1})).rows[0]
    assert row.scope == "acme/caf\u00e9" == job_scope({"kind": "github", "repo": "acme/cafe\u0301"})


@pytest.mark.parametrize(
    "folder", ["/srv/site", "/srv/site/", "/srv//site", "/srv/x/../site", "  /srv/site  ", "/srv/site/.", "/srv/site//"]
)
def test_a_local_jobs_folder_resolves_to_one_scope(folder: str) -> None:
    assert job_scope({"kind": "local", "folder": folder}) == "/srv/site"


def test_a_forge_repo_passes_through_untrimmed_and_a_scopeless_job_has_none() -> None:
    assert job_scope({"kind": "github", "repo": " acme/web "}) == " acme/web "
    assert job_scope({"kind": "github"}) is None and job_scope({"kind": "nope", "repo": "acme/web"}) is None


def test_concurrency_is_one_for_a_folder_and_the_rows_for_a_forge_job() -> None:
    row = ScopeRow("acme/web", WindowCaps(), 2)
    assert concurrency_for({"kind": "local", "folder": "/srv"}, ScopeRow("/srv", WindowCaps(), 5)) == 1
    assert concurrency_for({"kind": "github", "repo": "acme/web"}, None) is None
    assert concurrency_for({"kind": "github", "repo": "acme/web"}, row) == 2


def test_text_that_is_not_json_says_so() -> None:
    with pytest.raises(ScopedLimitsError, match="not JSON"):
        read_scoped_limits("{")
    assert read_scoped_limits(json.dumps(limits())).rows == ()
