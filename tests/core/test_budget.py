"""The limit windows' keys and judgements, with the reference's vectors (upstream-limits §3.8, §4.6)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from pi_dispatch.core.budget import (
    Verdict,
    Window,
    WindowCaps,
    WindowState,
    hash16,
    judge,
    scope_ledger,
    scope_slot_prefix,
    token_day_key,
    window_ends_ms,
    window_key,
    window_state,
)


def ms(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> int:
    return int(datetime(year, month, day, hour, minute, second, tzinfo=UTC).timestamp() * 1000)


NOW = ms(2026, 7, 16, 10)


def test_the_fleets_windows_are_keyed_as_the_reference_keys_them() -> None:
    assert [window_key("budget", window, NOW) for window in Window] == [
        "budget:2026-07-16", "budget:w:2026-07-13", "budget:m:2026-07",
    ]  # fmt: skip
    assert token_day_key(NOW) == "budget:t:2026-07-16"
    assert window_key("budget", Window.WEEK, ms(2026, 7, 13)) == "budget:w:2026-07-13"
    assert window_key("budget", Window.WEEK, ms(2026, 7, 19, 23, 59, 59)) == "budget:w:2026-07-13"
    assert window_key("budget", Window.WEEK, ms(2026, 7, 20)) == "budget:w:2026-07-20"
    assert window_key("budget", Window.WEEK, ms(2027, 1, 1)) == "budget:w:2026-12-28"


def test_a_scopes_ledger_and_slots_are_named_by_the_hash_of_its_row() -> None:
    goldens = {
        "acme/web": "86f279ce9c29f106", "mac-ollama": "4819885c480a71a3", "/srv/site": "3cd3201de5fe686c",
        "org/repo": "57b681c5cf8efdc2", "forgejo:acme/web": "51a39c48b08666c4", "github:acme/web": "ae5b3b31a94b074d",
    }  # fmt: skip
    assert {scope: hash16(scope) for scope in goldens} == goldens
    assert scope_ledger("acme/web") == "budget:s:86f279ce9c29f106"
    assert window_key(scope_ledger("acme/web"), Window.DAY, NOW) == "budget:s:86f279ce9c29f106:2026-07-16"
    assert scope_ledger("a:b/c") == "budget:s:fb7456513927a447" and scope_ledger("a/b:c") == "budget:s:3b07f80ca173745a"
    assert scope_slot_prefix("forgejo:acme/web") == "slot:s:51a39c48b08666c4:"


@pytest.mark.parametrize(
    ("reserved", "cap", "pct", "state"),
    [
        (8, 10, 80, WindowState.OK), (9, 10, 80, WindowState.SOFT_HOLD), (10, 10, 80, WindowState.SOFT_HOLD),
        (11, 10, 80, WindowState.OVER), (10, 10, None, WindowState.OK), (11, 10, None, WindowState.OVER),
        (1, 0, None, WindowState.OVER),
    ],
)  # fmt: skip
def test_a_windows_state_is_the_references(reserved: int, cap: int, pct: int | None, state: WindowState) -> None:
    assert window_state(reserved, cap, pct) is state


def test_over_is_judged_before_soft_hold_and_the_first_window_names_it() -> None:
    caps = WindowCaps(day=10, week=10)
    counts = {Window.DAY: 11, Window.WEEK: 9}
    assert judge(caps, counts, 80) == Verdict(WindowState.OVER, Window.DAY, 11, 10)
    assert judge(WindowCaps(100, 5, 100), {Window.DAY: 1, Window.WEEK: 6, Window.MONTH: 1}) == Verdict(
        WindowState.OVER, Window.WEEK, 6, 5
    )
    assert judge(caps, {Window.DAY: 5, Window.WEEK: 5}, 80) == Verdict(WindowState.OK)


def test_each_window_ends_at_the_utc_midnight_after_its_last_day() -> None:
    assert window_ends_ms(Window.DAY, NOW) == ms(2026, 7, 17)
    assert window_ends_ms(Window.WEEK, NOW) == ms(2026, 7, 20)
    assert window_ends_ms(Window.MONTH, NOW) == ms(2026, 8, 1)
    assert window_ends_ms(Window.MONTH, ms(2026, 12, 31, 23)) == ms(2027, 1, 1)


def test_each_window_of_the_table_is_counted_keyed_set_and_read_from_a_scoped_row() -> None:
    from pi_dispatch.config.limit_settings import LimitSettings
    from pi_dispatch.core.budget import WINDOWS
    from pi_dispatch.core.scopedlimits import DOLLAR_FIELDS, WINDOW_FIELDS

    assert [spec.window for spec in WINDOWS] == list(Window)  # one row per window, in the order they are judged
    declared = LimitSettings.model_fields
    assert all(spec.cap_setting in declared and spec.usd_setting in declared for spec in WINDOWS)
    assert (WINDOW_FIELDS, DOLLAR_FIELDS) == (("day", "week", "month"), ("dayUsd", "weekUsd", "monthUsd"))
    caps = WindowCaps.of(lambda spec: WINDOWS.index(spec) + 1)
    assert caps.active() == ((Window.DAY, 1), (Window.WEEK, 2), (Window.MONTH, 3))
