"""Wait-for rules (upstream-vectors §6.1-§6.3, §6.5)."""

from __future__ import annotations

import pytest

from pi_dispatch.core.reasons import WAIT_REASONS
from pi_dispatch.core.waits import (
    HoldState,
    WaitBounds,
    WaitConditions,
    WaitDecision,
    after_check,
    after_denied_slot,
    decide_wait,
    parse_after_instant,
    read_conditions,
    wait_backoff_ms,
)


@pytest.mark.parametrize(
    ("code", "verdict", "fault"),
    [
        (0, "go", False),
        (3, "hold", False),
        (2, "refuse", False),
        (1, "hold", True),
        (6, "hold", True),
        (127, "hold", True),
    ],
)
def test_decide_wait_by_exit_code(code: int, verdict: str, fault: bool) -> None:
    assert decide_wait(code) == WaitDecision(verdict, fault)  # type: ignore[arg-type]


def test_decide_wait_without_an_exit_code() -> None:
    for kwargs in ({"signalled": True}, {"failed_to_start": True}, {"timed_out": True}):
        assert decide_wait(None, **kwargs) == WaitDecision("hold", fault=True)
    assert decide_wait(None, aborted=True) == WaitDecision("hold", fault=False, aborted=True)


@pytest.mark.parametrize(
    ("base", "elapsed", "expected"),
    [
        (60000, 0, 60000),
        (60000, 599999, 60000),
        (60000, 600000, 120000),
        (60000, 1200000, 240000),
        (60000, 1800000, 480000),
        (60000, 2400000, 900000),
        (60000, 86400000, 900000),
        (3600000, 0, 3600000),
        (3600000, 360000000, 3600000),
        (0, 0, 30000),
        (-5, 100, 30000),
        (30000, 300000, 60000),
    ],
)
def test_wait_backoff(base: int, elapsed: int, expected: int) -> None:
    assert wait_backoff_ms(base, elapsed) == expected


@pytest.mark.parametrize(
    ("text", "epoch_ms", "error"),
    [
        ("2026-09-01T09:00:00Z", 1788253200000, None),
        ("2026-09-01t09:00+02:00", 1788246000000, None),
        ("2026-09-01T09:00:00.123-05:30", 1788273000123, None),
        ("2026-09-01T09:00:00", None, "shape"),
        ("2026-09-01T24:00:00Z", None, "shape"),
        ("2026-09-01T09:00:60Z", None, "shape"),
        ("2026-13-01T00:00Z", None, "calendar"),
        ("2026-02-31T00:00:00Z", None, "calendar"),
        ("2028-02-29T00:00:00Z", 1835395200000, None),
        ("2026-09-01T09:00:00Z\n", None, "shape"),
        (20260901, None, "shape"),
        ("\u0662026-09-01T09:00:00Z", None, "shape"),  # an Arabic-Indic digit, which the schema's \d refuses
    ],
)
def test_parse_after_instant(text: object, epoch_ms: int | None, error: str | None) -> None:
    parsed = parse_after_instant(text)
    assert (parsed.epoch_ms, parsed.error) == (epoch_ms, error)


def test_wait_reasons_are_the_references() -> None:
    assert set(WAIT_REASONS) == {
        "wait-refused",
        "wait-expired",
        "wait-unanswerable",
        "wait-profile-unknown",
        "wait-superseded",
        "wait-skew",
        "wait-unreadable",
        "wait-after-beyond-max",
    }


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ([{"profile": "ci"}], WaitConditions(None, ("ci",))),
        (
            [{"after": "2026-12-01T00:00:00Z"}, {"profile": "ci"}, {"profile": "qa"}],
            WaitConditions("2026-12-01T00:00:00Z", ("ci", "qa")),
        ),
        ([], None),
        ([{"profile": "a"}, {"profile": "b"}, {"profile": "c"}, {"profile": "d"}, {"profile": "e"}], None),
        ([{"profile": "ci"}, {"profile": "ci"}], None),
        ([{"after": "2026-12-01T00:00:00Z"}, {"after": "2026-12-02T00:00:00Z"}], None),
        ([{"profile": "ci", "after": "2026-12-01T00:00:00Z"}], None),
        ([{"exclusive": True}], None),
        ([{"profile": "bad name"}], None),
        ([{"profile": 3}], None),
        ([{"after": 3}], None),
        (["ci"], None),
        ({"profile": "ci"}, None),
        ("ci", None),
    ],
)
def test_read_conditions(value: object, expected: WaitConditions | None) -> None:
    assert read_conditions(value) == expected


BOUNDS = WaitBounds(interval_ms=60_000, max_ms=3_600_000, max_checks=5, max_faults=2)
HOLD = WaitDecision("hold", fault=False)
FAULT = WaitDecision("hold", fault=True)


def test_the_hold_clock_starts_at_the_first_hold() -> None:
    step = after_check(HoldState(), HOLD, 1_000_000, BOUNDS, jitter=0.0)
    assert step.reason is None and step.state == HoldState(1_000_000, 1, 0, checked=True)
    assert step.delay_ms == 60_000


def test_jitter_adds_up_to_ten_percent_and_never_subtracts() -> None:
    delays = [after_check(HoldState(), HOLD, 0, BOUNDS, jitter=j).delay_ms for j in (0.0, 0.5, 0.999, 5.0, -1.0)]
    assert delays == [60_000, 63_000, 65_994, 66_000, 60_000]


def test_the_delay_backs_off_and_is_clamped_to_what_remains() -> None:
    state = HoldState(0, 1, 0, checked=True)
    assert after_check(state, HOLD, 600_000, BOUNDS, 0.0).delay_ms == 120_000  # ten periods held: doubled
    assert after_check(state, HOLD, 3_590_000, BOUNDS, 0.0).delay_ms == 10_000  # what is left of max_ms
    assert after_check(state, HOLD, 3_599_500, BOUNDS, 0.0).delay_ms == 1_000  # never under a second


def test_the_bounds_are_tested_after_the_check() -> None:
    assert after_check(HoldState(0, 0, 1), FAULT, 10, BOUNDS, 0.0).reason == "wait-unanswerable"
    assert after_check(HoldState(0, 0, 1), HOLD, 10, BOUNDS, 0.0).reason is None  # faults must be consecutive
    assert after_check(HoldState(0, 4, 0), HOLD, 10, BOUNDS, 0.0).reason == "wait-expired"
    assert after_check(HoldState(0, 3, 0), HOLD, 10, BOUNDS, 0.0).reason is None
    assert after_check(HoldState(0, 1, 0), HOLD, 3_600_000, BOUNDS, 0.0).reason == "wait-expired"
    assert after_check(HoldState(0, 1, 0), WaitDecision("refuse", False), 10, BOUNDS, 0.0).reason == "wait-refused"


def test_a_denied_slot_defers_a_quarter_cadence_with_a_floor_and_counts_no_check() -> None:
    step = after_denied_slot(HoldState(), 0, BOUNDS, 0.0)
    assert (step.reason, step.delay_ms, step.state.checks, step.state.since_ms) == (None, 15_000, 0, 0)
    fast = WaitBounds(interval_ms=30_000, max_ms=3_600_000, max_checks=5, max_faults=2)
    assert after_denied_slot(HoldState(), 0, fast, 0.0).delay_ms == 11_000
    assert after_denied_slot(HoldState(0), 3_600_000, BOUNDS, 0.0).reason == "wait-expired"


@pytest.mark.parametrize(
    ("stored", "since_ms"),
    [
        (None, None),
        ("x", None),
        ([], None),
        ({"since": "1", "checks": -1, "faults": True, "checked": "yes"}, None),
        ({"since": -5, "checks": 1.5}, None),
        ({"since": True}, None),
        ({"since": 2**60, "checks": 2**60}, 2**60),  # a time far off is still a time; the counts are not counts
    ],
)
def test_hold_state_reads_hostile_data_as_no_hold(stored: object, since_ms: int | None) -> None:
    state = HoldState.from_data(stored)
    assert state.checks == 0 and state.faults == 0 and state.checked is False
    assert state.since_ms == since_ms


def test_hold_state_round_trips() -> None:
    state = HoldState(123, 4, 2, checked=True)
    assert HoldState.from_data(state.to_data()) == state
