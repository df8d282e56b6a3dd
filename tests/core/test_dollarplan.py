"""Which dollar windows a job holds its cap in, and the `fpUsd` fingerprint (upstream-limits §3.6, §3.7)."""

from __future__ import annotations

from pi_dispatch.core.budget import WindowCaps
from pi_dispatch.core.dollarplan import (
    USD_PREFIX,
    dollar_ledgers,
    host_usd_fingerprint,
    usd_model_prefix,
    usd_scope_prefix,
)
from pi_dispatch.core.money import usd_fingerprint
from pi_dispatch.core.scopedlimits import ScopedLimits, parse_scoped_limits

USD = 1_000_000
SCOPED = parse_scoped_limits({"version": 2, "limits": [
    {"scope": "acme/web", "dayUsd": "5"},
    {"scope": "model:openai/gpt-5.4", "dayUsd": "1"},
    {"scope": "model:anthropic/claude-x", "monthUsd": "9"},
]})  # fmt: skip


def test_the_keys_are_named_as_the_reference_names_them() -> None:
    assert usd_model_prefix("OpenAI/GPT-5.4") == "budget:usd:mdl:da5f158f5abee1de"
    assert usd_scope_prefix("acme/web") == "budget:usd:s:86f279ce9c29f106"


def test_a_job_holds_in_the_fleet_its_row_and_the_model_rows_it_may_call() -> None:
    fleet = WindowCaps(10 * USD)
    listed = dollar_ledgers(fleet, SCOPED, {"kind": "github", "repo": "acme/web", "models": ["OpenAI/gpt-5.4"]})
    assert [(ledger.kind, ledger.prefix) for ledger in listed] == [
        ("deployment", USD_PREFIX), ("scope", usd_scope_prefix("acme/web")),
        ("model", usd_model_prefix("openai/gpt-5.4")),
    ]  # fmt: skip
    # a job that lists no model could call any: it holds in every model row (the reference fails closed)
    unlisted = dollar_ledgers(WindowCaps(), SCOPED, {"kind": "github", "repo": "other/repo"})
    assert [ledger.model for ledger in unlisted] == ["openai/gpt-5.4", "anthropic/claude-x"]
    assert dollar_ledgers(WindowCaps(), ScopedLimits(), {"kind": "github", "repo": "acme/web"}) == []


def test_the_fingerprint_is_the_empty_golden_without_dollars_and_names_no_scope() -> None:
    assert host_usd_fingerprint(None, WindowCaps(), ScopedLimits()) == "7c593dfc8f2f8c36"
    assert host_usd_fingerprint(None, WindowCaps(), parse_scoped_limits({"version": 2, "limits": [
        {"scope": "acme/web", "day": 3}]})) == "7c593dfc8f2f8c36"  # fmt: skip
    with_dollars = host_usd_fingerprint(2 * USD, WindowCaps(10 * USD), SCOPED)
    expected = usd_fingerprint(
        {"maxCostUsd": 2 * USD, "dailyCostUsd": 10 * USD, "weeklyCostUsd": None, "monthlyCostUsd": None},
        [
            {"counter": usd_scope_prefix("acme/web"), "dayUsd": 5 * USD, "weekUsd": None, "monthUsd": None},
            {"counter": usd_model_prefix("openai/gpt-5.4"), "dayUsd": USD, "weekUsd": None, "monthUsd": None},
            {"counter": usd_model_prefix("anthropic/claude-x"), "dayUsd": None, "weekUsd": None, "monthUsd": 9 * USD},
        ],
        [usd_model_prefix("openai/gpt-5.4"), usd_model_prefix("anthropic/claude-x")],
    )
    assert with_dollars == expected != host_usd_fingerprint(2 * USD, WindowCaps(11 * USD), SCOPED)
