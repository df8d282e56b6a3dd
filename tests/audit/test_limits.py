"""The audit's limit findings, from the inventory alone: workers whose caps or limit files differ."""

from __future__ import annotations

from typing import Any

from pi_dispatch.audit.limits import limit_findings, live_limit_findings
from pi_dispatch.config.hostvars import PREFIX, InventoryHost
from pi_dispatch.core.budget import LIMITS_ROW_FIELD
from pi_dispatch.core.dollarplan import EMPTY_USD_FINGERPRINT, FPUSD_ROW_FIELD

LIMITS = {"version": 1, "limits": [{"scope": "acme/web", "day": 5}]}


def host(name: str, **declared: Any) -> InventoryHost:
    return InventoryHost(name, {f"{PREFIX}name": name, **{PREFIX + key: value for key, value in declared.items()}}, "t")


def test_hosts_that_run_with_the_same_caps_say_nothing_however_declared() -> None:
    hosts = [host("mini1", daily_cap=25, scoped_limits=LIMITS), host("mini2", scoped_limits=dict(LIMITS))]
    assert limit_findings(hosts) == []  # 25 is the default: mini2 runs with it too


def test_differing_caps_name_each_hosts_and_the_fix() -> None:
    findings = limit_findings([host("mini1", daily_cap=25), host("mini2", daily_cap=100), host("mini3")])
    assert [(finding.code, finding.subject, finding.hosts) for finding in findings] == [
        ("limits-differ", "caps", ("mini1", "mini2", "mini3"))
    ]
    assert "mini1, mini3: daily_cap 25" in findings[0].message and "mini2: daily_cap 100" in findings[0].message
    assert "group_vars" in findings[0].fix


def test_a_limit_file_on_one_host_only_is_named() -> None:
    findings = limit_findings([host("mini1", pause_windows={"windows": []}), host("mini2")])
    assert [finding.subject for finding in findings] == ["pi_dispatch_worker_pause_windows"]
    assert "mini2: none" in findings[0].message


def test_live_rows_that_say_different_limits_are_named_and_silent_rows_are_not() -> None:
    rows = [
        {"name": "mini1", LIMITS_ROW_FIELD: "day=25;week=;month=;hold=;tokens=;files="},
        {"name": "mini2", LIMITS_ROW_FIELD: "day=100;week=;month=;hold=;tokens=;files="},
        {"name": "node1"},  # a Node host publishes none
    ]
    findings = live_limit_findings(rows)
    assert [(finding.code, finding.subject, finding.hosts) for finding in findings] == [
        ("limits-differ", "live rows", ("mini1", "mini2"))
    ]
    assert live_limit_findings(rows[:1] + rows[2:]) == []


def test_inventory_dollar_caps_that_differ_are_named() -> None:
    findings = limit_findings([host("mini1", max_cost_usd="2.50"), host("mini2", max_cost_usd=2.5), host("mini3")])
    assert [(finding.code, finding.hosts) for finding in findings] == [("limits-differ", ("mini1", "mini2", "mini3"))]
    assert "mini1, mini2: " in findings[0].message and "max_cost_usd 2.50" in findings[0].message  # one amount
    assert "mini3: " in findings[0].message and "max_cost_usd none" in findings[0].message


def test_live_rows_that_cap_dollars_differently_are_named_as_a_node_doctor_would() -> None:
    capped = {"name": "mini1", FPUSD_ROW_FIELD: "3cdc0c028ede2fde"}
    findings = live_limit_findings([capped, {"name": "node1"}])  # a host that holds no dollars beside one that does
    assert [(finding.code, finding.hosts) for finding in findings] == [("spend-differs", ("mini1", "node1"))]
    assert "node1: none" in findings[0].message and "group_vars" in findings[0].fix
    empty = {"name": "mini2", FPUSD_ROW_FIELD: EMPTY_USD_FINGERPRINT}
    assert live_limit_findings([empty, {"name": "node1"}]) == []  # nobody caps dollars
    assert live_limit_findings([capped, {**capped, "name": "mini2"}]) == []
