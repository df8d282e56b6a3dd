"""Pause windows, read and judged as the reference does (upstream-limits §4.5), DST included."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from pi_dispatch.core.pausewindows import PauseWindowsError, parse_pause_windows, paused_until

GITHUB = {"kind": "github", "repo": "acme/web"}


def at(year: int, month: int, day: int, hour: int = 0, minute: int = 0, zone: str = "UTC") -> int:
    where = ZoneInfo(zone) if zone != "UTC" else UTC
    return int(datetime(year, month, day, hour, minute, tzinfo=where).timestamp() * 1000)


def windows(*rows: dict[str, Any]) -> Any:
    return parse_pause_windows({"windows": list(rows)})


def test_a_same_day_window_holds_from_its_start_until_its_end() -> None:
    paused = windows({"scope": "acme/web", "from": "09:00", "to": "17:00"})
    assert paused_until(paused, GITHUB, at(2026, 7, 16, 8, 59)) is None
    assert paused_until(paused, GITHUB, at(2026, 7, 16, 9)) == at(2026, 7, 16, 17)
    assert paused_until(paused, GITHUB, at(2026, 7, 16, 17)) is None
    assert paused_until(paused, {"kind": "github", "repo": "acme/other"}, at(2026, 7, 16, 10)) is None


def test_an_overnight_window_is_judged_by_the_day_it_starts() -> None:
    friday_nights = windows({"scope": "*", "from": "22:00", "to": "06:00", "days": ["Friday"]})
    assert paused_until(friday_nights, GITHUB, at(2026, 7, 17, 23)) == at(2026, 7, 18, 6)  # Friday 23:00
    assert paused_until(friday_nights, GITHUB, at(2026, 7, 18, 5)) == at(2026, 7, 18, 6)  # Saturday 05:00
    assert paused_until(friday_nights, GITHUB, at(2026, 7, 19, 5)) is None  # Sunday 05:00: Saturday's night is not
    assert paused_until(friday_nights, GITHUB, at(2026, 7, 16, 23)) is None  # Thursday


def test_a_zone_is_followed_across_a_dst_change() -> None:
    amsterdam = windows({"scope": "acme/web", "from": "01:00", "to": "04:00", "tz": "Europe/Amsterdam"})
    # 2026-03-29: clocks go from 02:00 to 03:00; the window still ends at 04:00 local, 02:00 UTC
    assert paused_until(amsterdam, GITHUB, at(2026, 3, 29, 0, 30)) == at(2026, 3, 29, 2)
    assert paused_until(amsterdam, GITHUB, at(2026, 7, 16, 1, 30)) == at(2026, 7, 16, 4, zone="Europe/Amsterdam")


def test_the_latest_end_wins_and_a_near_end_lets_the_job_through() -> None:
    both = windows(
        {"scope": "acme/web", "from": "09:00", "to": "10:00"}, {"scope": "*", "from": "09:30", "to": "11:00"}
    )
    assert paused_until(both, GITHUB, at(2026, 7, 16, 9, 45)) == at(2026, 7, 16, 11)
    one = windows({"scope": "acme/web", "from": "09:00", "to": "10:00"})
    assert paused_until(one, GITHUB, at(2026, 7, 16, 10) - 500) is None


def test_date_bounds_and_qualified_and_folder_scopes() -> None:
    bounded = windows(
        {"scope": "github:acme/web", "from": "00:00", "to": "23:59", "dateFrom": "2026-07-16", "dateTo": "2026-07-16"}
    )
    assert paused_until(bounded, GITHUB, at(2026, 7, 16, 12)) is not None
    assert paused_until(bounded, {"kind": "forgejo", "repo": "acme/web"}, at(2026, 7, 16, 12)) is None
    assert paused_until(bounded, GITHUB, at(2026, 7, 17, 12)) is None
    folder = windows({"scope": "/srv/site/", "from": "00:00", "to": "12:00"})
    assert paused_until(folder, {"kind": "local", "folder": "/srv/site/"}, at(2026, 7, 16, 1)) is not None
    assert paused_until(folder, {"kind": "local", "folder": "/srv/site"}, at(2026, 7, 16, 1)) is None  # as written


@pytest.mark.parametrize(
    "row",
    [
        {"scope": "acme/web", "from": "09:00", "to": "09:00"}, {"scope": "acme/web", "from": "9", "to": "10:00"},
        {"scope": "acme/web", "from": "24:00", "to": "10:00"}, {"scope": "", "from": "09:00", "to": "10:00"},
        {"scope": "acme/web", "from": "09:00", "to": "10:00", "tz": "Mars/Olympus"},
        {"scope": "acme/web", "from": "09:00", "to": "10:00", "days": []},
        {"scope": "acme/web", "from": "09:00", "to": "10:00", "days": ["xyz"]},
        {"scope": "acme/web", "from": "09:00", "to": "10:00", "dateFrom": "2026-13-01"},
        {"scope": "acme/web", "from": "09:00", "to": "10:00", "dateFrom": "2026-07-02", "dateTo": "2026-07-01"},
        {"scope": "gitub:acme/web", "from": "09:00", "to": "10:00"},
        {"scope": "github:acme", "from": "09:00", "to": "10:00"},
    ],
)  # fmt: skip
def test_a_bad_window_is_refused(row: dict[str, Any]) -> None:
    with pytest.raises(PauseWindowsError):
        windows(row)


def test_a_file_without_windows_is_refused() -> None:
    with pytest.raises(PauseWindowsError):
        parse_pause_windows({"pauses": []})
