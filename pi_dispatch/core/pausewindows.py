"""Pause windows (`PI_PAUSE_WINDOWS_FILE`), the reference's file: times when a repository's or a folder's jobs wait.

`{"windows": [{"scope": "acme/web", "from": "22:00", "to": "06:00", "tz": "Europe/Amsterdam", "days": ["fri"]}]}`

A window runs `[from, to)` on the days it starts (`days`, `dateFrom`, `dateTo` judge its start); `from` after `to`
is an overnight window. `scope` is a repository as written (every forge's), a forge's own (`github:acme/web`), a folder
as written, or `*` for every job. A job inside a window waits, delayed to the latest end of the windows it is in: no
record, no budget spent, nothing in the store but the delay. Each host reads its own file. Pure.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Any, Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pi_dispatch.core.errors import PiDispatchError
from pi_dispatch.core.scopes import job_qualified_scope, qualified_prefix, qualified_scope

WEEKDAYS: Final = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")  # datetime.weekday()'s order
EVERY_SCOPE: Final = "*"
# This port's: what a paused job's BullMQ progress says while it waits, so `job` can tell a pause from a retry
PAUSED_UNTIL: Final = "pausedUntil"
NEAR_ENOUGH_MS: Final = 1000  # a window ending sooner than this lets the job through rather than delay it for it
HHMM_RE: Final = re.compile(r"([0-9]{1,2}):([0-9]{2})")
DATE_RE: Final = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


class PauseWindowsError(PiDispatchError):
    """The file cannot be used as it is; the message names the window and the field."""


@dataclass(frozen=True)
class PauseWindow:
    scope: str
    start: time
    end: time
    zone: ZoneInfo
    days: frozenset[int] | None = None  # weekday numbers (Monday 0) a window may start on; None: every day
    date_from: date | None = None
    date_to: date | None = None

    def canonical(self) -> list[object]:
        """The window as what it pauses, for a digest that two hosts reading the same windows share."""
        days = sorted(self.days) if self.days is not None else None
        return [
            self.scope,
            self.start.isoformat(),
            self.end.isoformat(),
            self.zone.key,
            days,
            str(self.date_from),
            str(self.date_to),
        ]

    def starts_on(self, day: date) -> bool:
        if self.days is not None and day.weekday() not in self.days:
            return False
        return (self.date_from is None or day >= self.date_from) and (self.date_to is None or day <= self.date_to)

    def ends_at(self, now_ms: int) -> int | None:
        """When the occurrence of this window holding now_ms ends (epoch ms), or None when now is outside it."""
        local = datetime.fromtimestamp(now_ms / 1000, self.zone)
        today, now = local.date(), local.time().replace(second=0, microsecond=0)
        if self.start < self.end:  # the same day's [from, to)
            inside = self.start <= now < self.end and self.starts_on(today)
            return self._end_on(today) if inside else None
        if now >= self.start and self.starts_on(today):  # overnight, begun tonight
            return self._end_on(today + timedelta(days=1))
        if now < self.end and self.starts_on(today - timedelta(days=1)):  # overnight, begun last night
            return self._end_on(today)
        return None

    def _end_on(self, day: date) -> int:
        return int(datetime.combine(day, self.end, self.zone).timestamp() * 1000)


def _clock(value: object, where: str) -> time:
    found = HHMM_RE.fullmatch(value.strip()) if isinstance(value, str) else None
    if found is None or int(found[1]) > 23 or int(found[2]) > 59:
        raise PauseWindowsError(f'{where}: "HH:MM" from 00:00 to 23:59 is required, not {json.dumps(value)}')
    return time(int(found[1]), int(found[2]))


def _date(value: object, where: str) -> date | None:
    if value is None:
        return None
    text = str(value).strip()
    try:
        if DATE_RE.fullmatch(text) is None:
            raise ValueError
        return date.fromisoformat(text)
    except ValueError:
        raise PauseWindowsError(f'{where}: "YYYY-MM-DD" is required, not {json.dumps(value)}') from None


def _scope(value: object, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise PauseWindowsError(f"{where}.scope: a repository, a folder or * is required")
    scope = value.strip()
    if scope == EVERY_SCOPE or scope.startswith("/") or qualified_prefix(scope) is None:
        return scope
    try:
        return qualified_scope(scope)
    except ValueError as error:
        raise PauseWindowsError(f"{where}.scope {scope!r}: {error}") from None


def _days(value: object, where: str) -> frozenset[int] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        raise PauseWindowsError(f"{where}.days: a list of weekdays (mon..sun) is required, or leave it out")
    days = set()
    for day in value:
        key = str(day).strip().lower()[:3]
        if key not in WEEKDAYS:
            raise PauseWindowsError(f"{where}.days: unknown weekday {json.dumps(day)} (use mon..sun)")
        days.add(WEEKDAYS.index(key))
    return frozenset(days)


def _window(raw: object, index: int) -> PauseWindow:
    where = f"windows[{index}]"
    if not isinstance(raw, Mapping):
        raise PauseWindowsError(f"{where}: each window is an object with scope, from and to")
    scope = _scope(raw.get("scope"), where)
    start, end = _clock(raw.get("from"), f"{where}.from"), _clock(raw.get("to"), f"{where}.to")
    if start == end:
        raise PauseWindowsError(
            f"{where}: from and to are the same time; a window must end (to pause for good, remove the trigger)"
        )
    zone_name = raw.get("tz", "UTC")
    try:
        zone = ZoneInfo(zone_name) if isinstance(zone_name, str) and zone_name else None
    except (ZoneInfoNotFoundError, ValueError):
        zone = None
    if zone is None:
        raise PauseWindowsError(
            f"{where}.tz: an IANA time zone (Europe/Amsterdam) is required, not {json.dumps(zone_name)}"
        )
    date_from, date_to = _date(raw.get("dateFrom"), f"{where}.dateFrom"), _date(raw.get("dateTo"), f"{where}.dateTo")
    if date_from is not None and date_to is not None and date_from > date_to:
        raise PauseWindowsError(f"{where}: dateFrom comes after dateTo")
    return PauseWindow(scope, start, end, zone, _days(raw.get("days"), where), date_from, date_to)


def parse_pause_windows(raw: object) -> tuple[PauseWindow, ...]:
    windows = raw.get("windows") if isinstance(raw, Mapping) else None
    if not isinstance(windows, list):
        raise PauseWindowsError('the file must be a JSON object with a "windows" list: {"windows": [...]}')
    return tuple(_window(window, index) for index, window in enumerate(windows))


def read_pause_windows(text: str) -> tuple[PauseWindow, ...]:
    try:
        raw = json.loads(text)
    except ValueError as error:
        raise PauseWindowsError(f"not JSON ({error})") from None
    return parse_pause_windows(raw)


def pause_scopes(data: Mapping[str, Any]) -> tuple[str, ...]:
    """The spellings a window may name a job by: its folder or repository as written, and `<forge>:<repo>`."""
    if data.get("kind") == "local":
        folder = data.get("folder")
        return (folder,) if isinstance(folder, str) and folder.strip() else ()
    repo, kind = data.get("repo"), data.get("kind")
    if not isinstance(repo, str) or not repo.strip():
        return ()
    qualified = job_qualified_scope(kind, repo)
    return (repo, qualified) if qualified is not None else (repo,)


def paused_until(windows: tuple[PauseWindow, ...], data: Mapping[str, Any], now_ms: int) -> int | None:
    """When the job may run again (the latest end of the windows it is inside), or None when it may run now."""
    scopes = pause_scopes(data)
    if not scopes:
        return None
    ends = [
        end
        for window in windows
        if window.scope == EVERY_SCOPE or window.scope in scopes
        if (end := window.ends_at(now_ms)) is not None
    ]
    latest = max(ends, default=None)
    return latest if latest is not None and latest - now_ms > NEAR_ENOUGH_MS else None
