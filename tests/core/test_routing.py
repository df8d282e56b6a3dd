"""Routing (upstream-vectors §1): the reference's decision, its abstentions and reasons, and the snapshot router's
equivalence to it."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pi_dispatch.core.jscompat import fnv1a32
from pi_dispatch.core.routing import (
    ABSTAIN_ALL_CAPABLE,
    ABSTAIN_NO_NEEDS,
    ABSTAIN_NONE_CAPABLE,
    ABSTAIN_NOT_ROUTABLE,
    RouteTable,
    explain_route,
    route_forge_job,
)


def H(name: str, caps: str, routes: object = "true", stale_ms: object = 0) -> dict[str, Any]:
    return {"name": name, "caps": caps, "routes": routes, "staleMs": stale_ms}


TWO = [H("mini1", "s:prod,w:ci"), H("mini2", "w:ci")]


ROUTE_CASES = [
    ("abstain 1: needs nothing", TWO, [], "j", None),
    ("abstain 2: every live host serves", TWO, ["w:ci"], "j", None),
    ("abstain 3: no host serves", TWO, ["s:nowhere"], "j", None),
    (
        "abstain 4a: capable host has no queue",
        [H("mini1", "s:prod", routes="false"), H("mini2", "")],
        ["s:prod"],
        "j",
        None,
    ),
    ("abstain 4b: empty registry", [], ["s:prod"], "j", None),
    ("route", TWO, ["s:prod"], "j", "mini1"),
    ("all needs on one host", TWO, ["s:prod", "w:ci"], "j", "mini1"),
    ("stale host", [H("mini1", "s:prod", stale_ms=45001), H("mini2", "")], ["s:prod"], "j", None),
    ("fresh host", [H("mini1", "s:prod", stale_ms=44999), H("mini2", "")], ["s:prod"], "j", "mini1"),
    ("undatable row", [{"name": "mini1", "caps": "s:prod", "routes": "true"}, H("mini2", "")], ["s:prod"], "j", None),
    ("staleMs exactly 45000", [H("mini1", "s:prod", stale_ms=45000), H("mini2", "")], ["s:prod"], "j", "mini1"),
    ("routes boolean true", [H("m1", "s:p", routes=True), H("m2", "")], ["s:p"], "any", "m1"),
    ("stale peer is not live", [H("m1", "s:p"), H("m2", "", stale_ms=999999)], ["s:p"], "any", None),
    ("staleMs as numeric string", [H("m1", "s:p", stale_ms=" 100 "), H("m2", "")], ["s:p"], "x", "m1"),
    ("hostile rows are skipped", [None, "x", 7, H("m1", "s:p"), H("m2", "")], ["s:p"], "x", "m1"),
]


@pytest.mark.parametrize(
    ("label", "hosts", "needs", "job_id", "expected"), ROUTE_CASES, ids=[c[0] for c in ROUTE_CASES]
)
def test_route_forge_job(label: str, hosts: list[Any], needs: list[str], job_id: str, expected: str | None) -> None:
    assert route_forge_job(hosts, needs, job_id) == expected
    assert RouteTable.from_hosts(hosts).route(needs, job_id) == expected


MANY = [H("a", "s:prod"), H("b", "s:prod"), H("c", "s:prod"), H("d", "")]


def test_route_is_deterministic_and_spreads() -> None:
    pick = route_forge_job(MANY, ["s:prod"], "gh:acme/web:d-1")
    assert all(route_forge_job(MANY, ["s:prod"], "gh:acme/web:d-1") == pick for _ in range(5))
    counts = Counter(route_forge_job(MANY, ["s:prod"], f"gh:acme/web:delivery-{i}") for i in range(3000))
    assert counts == {"a": 1014, "b": 979, "c": 1007}
    assert all(700 < count < 1300 for count in counts.values())


def test_route_ignores_host_order() -> None:
    hosts = [H("a", "s:prod"), H("b", "s:prod"), H("z", "")]
    for job_id in ("j1", "j2", "j3", "j4"):
        assert route_forge_job(hosts, ["s:prod"], job_id) == route_forge_job(hosts[::-1], ["s:prod"], job_id)


@pytest.mark.parametrize(
    ("job_id", "fnv", "of_two", "of_three"),
    [
        ("", 2166136261, "b", "b"),
        ("j", 4010556029, "b", "c"),
        ("j1", 2621425060, "a", "b"),
        ("j2", 2671757917, "b", "b"),
        ("j3", 2654980298, "a", "c"),
        ("j4", 2571092203, "b", "b"),
        ("gh:acme/web:d-1", 463780771, "b", "b"),
        ("gh-d-1", 190005969, "b", "a"),
        ("gh-3f2a8c10-1d2e-11ef-9a7c-0242ac120002", 452187585, "b", "a"),
        ("gh-3f2a8c10-1d2e-11ef-9a7c-0242ac120002-r2", 3643177808, "a", "c"),
        ("gl-abc", 2946551991, "b", "a"),
        ("fj-x", 3977495868, "a", "a"),
        ("az-y", 1015795372, "a", "b"),
        ("h\u00e9llo", 4058363231, "b", "c"),
        ("\U0001f600", 3409036472, "a", "c"),
    ],
)
def test_pick_by_fnv(job_id: str, fnv: int, of_two: str, of_three: str) -> None:
    assert fnv1a32(job_id) == fnv
    two = [H("b", "s:p"), H("a", "s:p"), H("x", "")]
    three = [H("c", "s:p"), H("a", "s:p"), H("b", "s:p"), H("x", "")]
    assert route_forge_job(two, ["s:p"], job_id) == of_two
    assert route_forge_job(three, ["s:p"], job_id) == of_three


def test_none_job_id_hashes_as_empty_string() -> None:
    assert route_forge_job([H("a", "s:p"), H("b", "s:p"), H("x", "")], ["s:p"], None) == "b"


names = st.sampled_from(["a", "b", "mini1", "mini2", "Mini", "", "é"])
tokens = st.sampled_from(["s:prod", "w:ci", "s:a", "x:y", "s:", "s:a:b", "w:ci "])
hosts_strategy = st.lists(
    st.fixed_dictionaries(
        {"name": names, "caps": st.lists(tokens, max_size=3).map(",".join)},
        optional={
            "routes": st.sampled_from(["true", "false", True, False, None, 1]),
            "staleMs": st.one_of(st.integers(0, 90_000), st.sampled_from(["", "45000", "nan", None])),
        },
    ),
    max_size=6,
)


@settings(max_examples=400)
@given(hosts_strategy, st.lists(tokens, max_size=3), st.text(max_size=12))
def test_route_table_equals_route_forge_job(hosts: list[Any], needs: list[str], job_id: str) -> None:
    table = RouteTable.from_hosts(hosts)
    assert table.route(needs, job_id) == route_forge_job(hosts, needs, job_id)
    assert table.route(needs, job_id) == route_forge_job(hosts, needs, job_id)  # memoised path


def test_explain_route_names_each_abstention_and_each_host() -> None:
    hosts = [H("mini1", "s:prod,w:ci"), H("mini2", "w:ci"), H("mini3", "w:ci", routes="false", stale_ms=60_000)]
    routed = explain_route(hosts, {"secretsProfile": "prod"}, "gh-d-1")
    assert routed.host == "mini1" and routed.abstention is None
    reasons = {verdict.name: verdict.reason for verdict in routed.hosts}
    assert reasons["mini1"] == "chosen"
    assert reasons["mini2"] == "lacks s:prod"
    assert reasons["mini3"].startswith("stale by 60 s")
    assert explain_route(hosts, {}, "x").abstention == ABSTAIN_NO_NEEDS
    everywhere = explain_route(hosts, {"waitFor": [{"profile": "ci"}]}, "x")
    assert everywhere.abstention == ABSTAIN_ALL_CAPABLE
    assert everywhere.hosts[0].reason == "capable; the job stays on the shared queue (see why no host was chosen)"
    two_capable = explain_route(
        [H("mini1", "s:prod"), H("mini2", "s:prod"), H("mini3", "")], {"secretsProfile": "prod"}, "x"
    )
    assert sorted(verdict.reason for verdict in two_capable.hosts[:2]) == [
        "capable; another capable host won the job-id hash",
        "chosen",
    ]
    assert explain_route(hosts, {"secretsProfile": "nope"}, "x").abstention == ABSTAIN_NONE_CAPABLE
    unnamed = [H("mini1", "s:prod", routes="false"), H("mini2", "")]
    explained = explain_route(unnamed, {"secretsProfile": "prod"}, "x")
    assert explained.abstention == ABSTAIN_NOT_ROUTABLE
    assert "no declared PI_WORKER_NAME" in explained.hosts[0].reason
