"""Wait-for rules (upstream-vectors §6.1-§6.3, §6.5)."""

from __future__ import annotations

import pytest

from pi_dispatch.waits import WAIT_REASONS, WaitDecision, decide_wait, parse_after_instant, wait_backoff_ms


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
