"""The egress switch and the allowlist grammar, with the reference's vectors (upstream-limits.md §1.7)."""

from __future__ import annotations

import pytest

from pi_dispatch.core.egress import Denied, Destination, egress_armed, parse_allowlist, parse_denied
from pi_dispatch.core.errors import ConfigError


@pytest.mark.parametrize(("raw", "armed"), [(None, True), ("", True), ("1", True), ("0", False)])
def test_the_switch_is_on_unless_exactly_0(raw: str | None, armed: bool) -> None:
    assert egress_armed(raw) is armed


@pytest.mark.parametrize("raw", ["yes", "true", "01", " 0", "off", "2"])
def test_any_other_switch_value_is_refused(raw: str) -> None:
    with pytest.raises(ValueError, match="exactly 0"):
        egress_armed(raw)


def test_a_reference_allowlist_reads_as_written() -> None:
    text = "# model and forge\napi.anthropic.com\n.github.com\n\n  registry.npmjs.org  \nGitHub.com\n.github.com\n"
    listed = parse_allowlist(text, "egress-allowlist.conf")
    assert listed.destinations == (
        Destination("api.anthropic.com"),
        Destination("github.com", subdomains=True),
        Destination("registry.npmjs.org"),
        Destination("github.com"),
    )
    assert listed.ports == (443,)
    assert listed.allows("api.github.com", 443) and listed.allows("github.com", 443)
    assert not listed.allows("api.anthropic.com.evil.example", 443) and not listed.allows("github.com", 22)
    assert not listed.allows("evilgithub.com", 443)


def test_ours_adds_a_port_and_address_literals_match_only_as_written() -> None:
    listed = parse_allowlist("registry.example:8443\n198.51.100.7\n[2001:db8::1]:443\n", "profile prod")
    assert listed.ports == (443, 8443)
    assert listed.allows("registry.example", 8443) and not listed.allows("registry.example", 443)
    assert listed.allows("198.51.100.7", 443) and listed.destinations[1].literal
    assert listed.destinations[2] == Destination("[2001:db8::1]", False, 443)


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("*", "wildcard"),
        ("*.example.com", "wildcard"),
        (".", "not a name"),
        (".com", "two labels"),
        ("com", "two labels"),
        ("api.example.com # the API", "comment after"),
        ("a.example b.example", "more than one entry"),
        ("api.example.com:0", "port out of"),
        ("api.example.com:70000", "port out of"),
        (".198.51.100.7", "dot before an address"),
        ("bad_label-.example", "not a name"),
        ("http://api.example.com", "not a name"),
    ],
)
def test_what_the_file_may_not_say_is_refused_by_line_never_by_value(line: str, why: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_allowlist(f"ok.example\n{line}\n", "egress-allowlist.conf")
    [problem] = refused.value.problems
    assert problem.subject == "line 2" and why in problem.message and problem.source == "egress-allowlist.conf"
    assert len(line) < 5 or line.split(maxsplit=1)[0] not in problem.subject + problem.message


def test_a_refusal_line_reads_as_when_who_what_where() -> None:
    found = parse_denied("1796483585.623 172.18.0.3 CONNECT Paste.Example 443\n")
    assert found == Denied(1_796_483_585_623, "172.18.0.3", "CONNECT", "paste.example", 443)


@pytest.mark.parametrize(
    "line",
    [
        "",
        "garbage",
        "1796483585.623 172.18.0.3 CONNECT paste.example 0",
        "1796483585.623 172.18.0.3 CONNECT paste.example 70000",
        "1796483585.623 not-an-address CONNECT paste.example 443",
        "1796483585.623 172.18.0.3 connect paste.example 443",
        "1796483585.623 172.18.0.3 CONNECT paste.example/../x 443",
        "1796483585.623 172.18.0.3 CONNECT " + "a" * 300 + " 443",
        "1796483585.623 172.18.0.3 CONNECT paste.example 443 extra",
        "1796483585.623 172.18.0.3 CONNECT pa\x1bste.example 443",
    ],
)
def test_a_line_out_of_shape_is_left_out(line: str) -> None:
    assert parse_denied(line) is None
