"""Egress per profile: which network a job joins, decided by the host from the profiles it binds."""

from __future__ import annotations

from pi_dispatch.core.egress import parse_allowlist
from pi_dispatch.core.egressprofiles import (
    OFFLINE_NETWORK,
    EgressNetwork,
    EgressPlan,
    ProfilesDiffer,
    list_digest,
)

NARROW = parse_allowlist("api.example.com\n.cdn.example\n", "test")
SAME_NARROW = parse_allowlist("# the same, otherwise written\n.cdn.example\napi.example.com\napi.example.com\n", "t")
WIDE = parse_allowlist("api.example.com\n.cdn.example\ngit.example:8443\n", "test")
OFFLINE = parse_allowlist("# nothing\n", "test")
PLAN = EgressPlan("pi-egress", {"deploy": NARROW, "release": SAME_NARROW, "mirror": WIDE, "sealed": OFFLINE})


def test_a_lists_network_is_named_by_what_it_allows_whatever_its_order_comments_or_duplicates() -> None:
    network = EgressNetwork.of(NARROW)
    same, wide = EgressNetwork.of(SAME_NARROW), EgressNetwork.of(WIDE)
    assert (network.name, network.bridge) == (same.name, same.bridge) and wide.name != network.name
    assert network.name == f"pi-egress-{list_digest(NARROW)}" and len(network.bridge) <= 15
    assert EgressNetwork.of(parse_allowlist("api.example.com:8443\n.cdn.example\n", "t")).name != network.name


def test_a_job_joins_its_profiles_network_the_hosts_own_without_one_and_none_when_offline() -> None:
    assert PLAN.network_for([]) == "pi-egress"
    assert PLAN.network_for(["undeclared"]) == "pi-egress"  # no list of its own: the host's
    assert PLAN.network_for(["deploy"]) == EgressNetwork.of(NARROW).name
    assert PLAN.network_for(["deploy", "undeclared"]) == EgressNetwork.of(NARROW).name  # the one with a list decides
    assert PLAN.network_for(["deploy", "release"]) == EgressNetwork.of(NARROW).name  # the same list, twice
    assert PLAN.network_for(["sealed"]) == OFFLINE_NETWORK


def test_profiles_whose_lists_differ_refuse_the_job_naming_them() -> None:
    assert PLAN.network_for(["mirror", "deploy", "undeclared"]) == ProfilesDiffer(("deploy", "mirror"))
    assert PLAN.network_for(["sealed", "deploy"]) == ProfilesDiffer(("deploy", "sealed"))  # offline is a list too


def test_the_proxy_serves_one_network_per_distinct_list_offline_needing_none() -> None:
    assert PLAN.networks() == (EgressNetwork.of(NARROW), EgressNetwork.of(WIDE))
    assert PLAN.network_names() == ("pi-egress", EgressNetwork.of(NARROW).name, EgressNetwork.of(WIDE).name)
    assert EgressPlan(None, {"sealed": OFFLINE}).network_names() == ()  # egress off: no proxy to find
