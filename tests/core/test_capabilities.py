"""Capabilities (upstream-vectors §1): tokens, caps and a job's needs; where a job goes: tests/core/test_routing.py."""

from __future__ import annotations

import pytest

from pi_dispatch.core.capabilities import (
    CAP_SECRET,
    CAP_WAIT,
    ROUTE_FRESH_MS,
    capability_tokens,
    job_needs,
    parse_caps,
    parse_caps_ordered,
    serialize_caps,
)


def test_constants() -> None:
    assert (CAP_SECRET, CAP_WAIT, ROUTE_FRESH_MS) == ("s", "w", 45_000)


def test_tokens_are_names_only_and_sorted() -> None:
    tokens = capability_tokens(
        {"prod": "/opt/vault/read.sh", "staging": "/opt/vault/stage.sh"}, {"ci": "/usr/local/bin/green.sh"}
    )
    assert tokens == ["s:prod", "s:staging", "w:ci"]
    assert "/" not in serialize_caps(tokens)


def test_tokens_do_not_depend_on_declaration_order() -> None:
    assert capability_tokens({"b": 1, "a": 1}, {"c": 1}) == capability_tokens({"a": 1, "b": 1}, {"c": 1})
    assert capability_tokens({"b": 1, "a": 1}, {"c": 1}) == ["s:a", "s:b", "w:c"]


def test_serialize() -> None:
    assert serialize_caps(["s:a", "w:b"]) == "s:a,w:b"
    assert serialize_caps(None) == serialize_caps([]) == ""


def test_invalid_profile_name_is_skipped() -> None:
    assert capability_tokens({"bad name": "/x", "ok": "/y"}) == ["s:ok"]


def test_parse_caps_revalidates_peer_tokens() -> None:
    assert parse_caps_ordered("s:prod,x:evil,s:../../etc,w:ci,,:bad,s:,w") == ["s:prod", "w:ci"]
    assert parse_caps(None) == set()
    assert parse_caps("s:a:b") == set()
    assert parse_caps("S:prod") == set()


@pytest.mark.parametrize(
    ("job", "needs"),
    [
        ({"secretsProfile": "prod"}, ["s:prod"]),
        ({"waitFor": [{"profile": "ci"}, {"after": "2026-01-01"}]}, ["w:ci"]),
        ({"secretsProfile": "prod", "waitFor": [{"profile": "ci"}]}, ["s:prod", "w:ci"]),
        ({}, []),
        ({"secretsProfile": "../etc/passwd"}, []),
        ({"waitFor": [{"profile": "b"}, {"profile": "a"}, {"profile": "b"}]}, ["w:a", "w:b"]),
        ({"waitFor": "ci"}, []),
        ({"secrets": {"A": "op://x"}}, []),  # the implicit `default` profile is never a need
        (None, []),
        ("not a job", []),
    ],
)
def test_job_needs(job: object, needs: list[str]) -> None:
    assert job_needs(job) == needs
