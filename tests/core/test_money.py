"""Dollar amounts, with the reference's vectors (upstream-limits §3.8, `money.test.mjs`)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pi_dispatch.core.money import (
    FLOOR_COUNTERS,
    dollar_settlement,
    effective_cost_cap_micros,
    format_micros,
    metered_micros,
    model_settlement,
    parse_usd_micros,
    read_dollars,
    usd_fingerprint,
)


@pytest.mark.parametrize(
    ("value", "micros"),
    [
        ("2.50", 2_500_000), ("0.000001", 1), ("1.005", 1_005_000), ("999999.999999", 999_999_999_999),
        ("1000000", 1_000_000_000_000), (0.29, 290_000), (json.loads("1e2"), 100_000_000),
    ],
)  # fmt: skip
def test_the_amounts_the_reference_takes(value: object, micros: int) -> None:
    assert parse_usd_micros(value) == micros


@pytest.mark.parametrize(
    "value",
    [
        "0", 0, "0.0000001", 1.1234567, 0.1 + 0.2, 1e-7, 1e21, "1e3", "1000000.000001", "1000001", "-1", "+1", "01",
        ".5", "5.", "1,5", " 2", "2\n", "", "NaN", None, True, {}, ["2"],
    ],
)  # fmt: skip
def test_the_amounts_the_reference_refuses(value: object) -> None:
    assert parse_usd_micros(value) is None


def test_micros_print_as_the_reference_prints_them() -> None:
    assert [format_micros(micros) for micros in (2_500_000, 1, 0)] == ["2.50", "0.000001", "0.00"]


def test_a_trigger_only_narrows_the_hosts_cap_and_a_bad_one_allows_nothing() -> None:
    assert effective_cost_cap_micros("1.5", "5") == 1_500_000
    assert effective_cost_cap_micros("9", "5") == 5_000_000
    assert effective_cost_cap_micros(None, "5") == 5_000_000
    assert effective_cost_cap_micros("1.5", None) == 1_500_000
    malformed: list[object] = ["lots", -1, 0, {}]
    assert [effective_cost_cap_micros(bad, "5") for bad in malformed] == [0, 0, 0, 0]
    assert effective_cost_cap_micros(None, None) is None


def test_the_empty_fingerprint_is_the_references_and_order_and_spelling_do_not_matter() -> None:
    assert usd_fingerprint({}, [], []) == "7c593dfc8f2f8c36"
    rows: list[dict[str, int | str | None]] = [
        {"counter": "budget:usd:s:b", "dayUsd": 2_000_000}, {"counter": "budget:usd:s:a", "weekUsd": None}
    ]  # fmt: skip
    one = usd_fingerprint({"maxCostUsd": parse_usd_micros(2)}, rows, ["budget:usd:mdl:y", "budget:usd:mdl:x"])
    other = usd_fingerprint(
        {"maxCostUsd": parse_usd_micros("2.000000")}, rows[::-1], ["budget:usd:mdl:x", "budget:usd:mdl:y"]
    )  # fmt: skip
    assert one == other != usd_fingerprint({"maxCostUsd": parse_usd_micros(3)}, rows, [])


COMPLETE = {"input": 10, "output": 5, "total": 15, "cost": 0.123456, "metered": True, "calls": 2,
            "costCapMicros": 2_000_000, **dict.fromkeys(FLOOR_COUNTERS, 0)}  # fmt: skip


def test_a_trusted_complete_run_is_charged_its_meter_and_anything_short_of_it_the_floor() -> None:
    assert dollar_settlement(COMPLETE, True, trusted=True, reserved=2_000_000) == (123_456, "metered")
    unanswered = {**COMPLETE, "costUnanswered": 1, "calls": 1, "cost": 0}
    assert dollar_settlement(unanswered, True, trusted=True, reserved=2_000_000) == (2_000_000, "floor")
    idle = {**COMPLETE, "calls": 0, "cost": 0}
    assert dollar_settlement(idle, False, trusted=True, reserved=2_000_000) == (0, "metered")
    assert dollar_settlement({**idle, "costRefused": 1}, False, trusted=True, reserved=2_000_000) == (0, "metered")
    for counter in FLOOR_COUNTERS:
        absent = {key: value for key, value in COMPLETE.items() if key != counter}
        assert dollar_settlement(absent, True, trusted=True, reserved=2_000_000)[1] == "floor"
        assert dollar_settlement({**COMPLETE, counter: 1}, True, trusted=True, reserved=2_000_000)[1] == "floor"
    assert dollar_settlement({**COMPLETE, "cost": 5, "unpriced": 1}, True, trusted=True, reserved=2_000_000) == (
        5_000_000, "floor"
    )  # fmt: skip
    over = {**COMPLETE, "costCapMicros": 2_000_001}
    assert dollar_settlement(over, True, trusted=True, reserved=2_000_000) == (2_000_000, "floor")
    assert dollar_settlement(COMPLETE, True, trusted=False, reserved=2_000_000) == (2_000_000, "floor")
    assert dollar_settlement(None, False, trusted=True, reserved=2_000_000) == (2_000_000, "floor")


def test_a_cost_is_rounded_up_to_a_micro_and_a_non_cost_is_none() -> None:
    assert [metered_micros(cost) for cost in (0.0000014, 0.1 + 0.2, -1, 1e300, 0, True)] == [
        2, 300_001, None, None, 0, None
    ]  # fmt: skip


def settled(usage: dict[str, Any] | None, model: str, **changed: Any) -> tuple[int, str]:
    facts: dict[str, Any] = {"job_basis": "metered", "trusted": True, "calls": 2, "reserved": 9_000_000} | changed
    return model_settlement(usage, model, **facts)


def test_a_models_window_is_charged_its_own_rows_whatever_their_case() -> None:
    usage = {"v": 1, "truncated": 0, "models": [
        {"provider": "openai", "model": "gpt-x", "cost": 0.25},
        {"provider": "anthropic", "model": "claude-x", "cost": 1.5},
    ]}  # fmt: skip
    assert settled(usage, "openai/gpt-x") == (250_000, "metered")
    assert settled(usage, "anthropic/claude-x") == (1_500_000, "metered")
    assert settled(usage, "mistral/m") == (0, "metered")  # no row: nothing spent on it
    cased = {"v": 1, "truncated": 0, "models": [
        {"provider": "openai", "model": "gpt-x", "cost": 1}, {"provider": "OpenAI", "model": "GPT-x", "cost": 0.75},
    ]}  # fmt: skip
    assert settled(cased, "openai/gpt-x") == (1_750_000, "metered")


def test_a_models_window_keeps_its_hold_when_the_run_or_its_ledger_cannot_be_trusted() -> None:
    row = {"provider": "openai", "model": "gpt-x", "cost": 0.25}
    usage: dict[str, Any] = {"v": 1, "truncated": 0, "models": [row]}
    held = (9_000_000, "floor")
    assert settled(usage, "openai/gpt-x", job_basis="floor") == held
    assert settled(usage, "openai/gpt-x", trusted=False) == held
    assert settled(None, "openai/gpt-x") == held  # calls made, no ledger
    assert settled(None, "openai/gpt-x", calls=0) == (0, "metered")
    assert settled(usage | {"truncated": None}, "openai/gpt-x") == held
    priced_other = {"provider": "other", "model": "other", "cost": 0.1}
    assert settled(usage | {"models": [row, priced_other]}, "openai/gpt-x") == held


def test_a_records_dollars_are_rebuilt_or_dropped_whole() -> None:
    written = {"reservedMicros": 2_000_000, "settledMicros": 123_456, "basis": "metered", "modelBasis": None, "x": 1}
    assert read_dollars(written) == {k: v for k, v in written.items() if k != "x"}
    broken: list[object] = [
        {**written, "basis": "guess"}, {**written, "settledMicros": -1}, {**written, "reservedMicros": 1.5},
        {**written, "modelBasis": "unreserved"}, {**written, "settledMicros": True}, [], None,
    ]  # fmt: skip
    for each in broken:
        assert read_dollars(each) is None
