"""The caps a reader without an env file judges the windows by (`top`): what most live hosts publish."""

from __future__ import annotations

from pi_dispatch.core.budget import DEFAULT_DAILY_CAP, LIMITS_ROW_FIELD, WindowCaps
from pi_dispatch.fleet.limitview import published_caps

TEN = "day=10;week=;month=;hold=;tokens=5000;files="
FORTY = "day=40;week=7;month=;hold=;tokens=;files=ab"


def test_the_caps_most_hosts_publish_win_and_a_tie_goes_to_the_first_said() -> None:
    rows = [{LIMITS_ROW_FIELD: text} for text in (FORTY, TEN, TEN, "not limits", FORTY, TEN)]
    assert published_caps(rows) == (WindowCaps(10), 5000)
    assert published_caps([{LIMITS_ROW_FIELD: FORTY}, {LIMITS_ROW_FIELD: TEN}]) == (WindowCaps(40, 7), None)
    assert published_caps([{"name": "old"}]) == (WindowCaps(DEFAULT_DAILY_CAP), None)


def test_thousands_of_hosts_are_counted_in_one_pass() -> None:
    rows = [{LIMITS_ROW_FIELD: FORTY if number % 3 else TEN} for number in range(20_000)]
    assert published_caps(rows) == (WindowCaps(40, 7), None)  # quadratic, this took minutes
