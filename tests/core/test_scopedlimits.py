"""The scoped limits file, versions 1 and 2, read as the reference reads it (upstream-limits §4.1, §4.6)."""

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
    with pytest.raises(ScopedLimitsError, match=r"version 3: written by a newer .* reads version 2"):
        parse_scoped_limits(limits({"scope": "acme/web", "day": 1}, version=3))


def test_version_2_reads_dollar_caps_model_rows_and_qualified_scopes() -> None:
    parsed = parse_scoped_limits(limits(
        {"scope": "acme/web", "dayUsd": "5", "weekUsd": 20, "concurrent": 1},
        {"scope": "forgejo:acme/api", "monthUsd": "0.5"},
        {"scope": "model:OpenAI/GPT-5.4", "dayUsd": "1.25"},
        version=2,
    ))  # fmt: skip
    web, api, model = parsed.rows
    assert web.dollars == WindowCaps(5_000_000, 20_000_000, None) and web.concurrent == 1
    assert api.scope == "forgejo:acme/api" and api.dollars.month == 500_000
    assert model.model == "openai/gpt-5.4" and parsed.model_rows() == (model,)
    assert parsed.dollar_rows() == (web, api, model)
    # a forge job matches its qualified row first, then its bare one; a model row never matches a job
    assert parsed.row_of({"kind": "forgejo", "repo": "acme/api"}) == api
    assert parsed.row_of({"kind": "github", "repo": "acme/api"}) is None
    assert parsed.row_of({"kind": "github", "repo": "acme/web"}) == web
    assert parsed.row_for("model:OpenAI/GPT-5.4") is None


def test_version_1_drops_dollar_fields_and_keeps_a_colon_scope_bare() -> None:
    parsed = parse_scoped_limits(limits({"scope": "a:b/c", "day": 1, "dayUsd": "5"}))
    assert parsed.rows == (ScopeRow("a:b/c", WindowCaps(1), None),)
    with pytest.raises(ScopedLimitsError, match="no limit"):
        parse_scoped_limits(limits({"scope": "acme/web", "dayUsd": "5"}))


@pytest.mark.parametrize(
    "row",
    [
        {"scope": "acme/web", "dayUsd": "0"}, {"scope": "acme/web", "dayUsd": "1.1234567"},
        {"scope": "acme/web", "dayUsd": "-1"}, {"scope": "acme/web", "weekUsd": True},
        {"scope": "model:other/other", "dayUsd": "1"}, {"scope": "Model:openai/gpt", "dayUsd": "1"},
        {"scope": "models:openai/gpt", "dayUsd": "1"}, {"scope": "model :openai/gpt", "dayUsd": "1"},
        {"scope": "model:gpt", "dayUsd": "1"}, {"scope": "model:openai/gpt", "day": 3},
        {"scope": "model:openai/gpt", "concurrent": 1}, {"scope": "gitea:acme/web", "day": 1},
        {"scope": "github:web", "day": 1}, {"scope": "github:acme/web#x", "day": 1}, {"scope": "a:b/c", "day": 1},
        {"scope": "project:shop", "dayUsd": "1"},
    ],
)  # fmt: skip
def test_what_a_version_2_reader_refuses(row: object) -> None:
    with pytest.raises(ScopedLimitsError):
        parse_scoped_limits(limits(row, version=2))


def test_a_repository_limited_bare_and_qualified_is_refused_and_models_compare_lowercase() -> None:
    with pytest.raises(ScopedLimitsError, match="both limit one repository"):
        parse_scoped_limits(limits({"scope": "acme/web", "day": 1}, {"scope": "github:acme/web", "day": 2}, version=2))
    with pytest.raises(ScopedLimitsError, match="limited twice"):
        parse_scoped_limits(limits(
            {"scope": "model:openai/gpt", "dayUsd": 1}, {"scope": "model:OpenAI/GPT", "dayUsd": 2}, version=2
        ))  # fmt: skip


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
