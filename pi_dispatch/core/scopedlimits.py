"""Scoped limits (`PI_SCOPED_LIMITS_FILE`), the reference's version 1 file: per repository or local folder, caps on
the starts of a day, week or month (each a ledger, `core/budget.py`) and on how many of its jobs run at once.

`{"version": 1, "limits": [{"scope": "acme/web", "day": 20, "concurrent": 1}, {"scope": "/srv/site", "week": 5}]}`

A row's scope is matched by exact string equality against the job's: a forge job's `repo`, or a local job's folder
resolved. Every key a row leads to is named by the row's own scope string. What the reference refuses is refused
here too, naming the row and the field; unknown keys are dropped, as version 1 readers do. Pure.
"""

from __future__ import annotations

import json
import math
import posixpath
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from pi_dispatch.core.budget import WindowCaps
from pi_dispatch.core.errors import PiDispatchError
from pi_dispatch.core.forges import FORGES

SCOPED_LIMITS_VERSION: Final = 1  # the newest version of the file this build reads
SAFE_INTEGER_MAX: Final = 2**53 - 1  # JavaScript's: a Node host reads the same file
WINDOW_FIELDS: Final = ("day", "week", "month")
LOCAL_KIND: Final = "local"


class ScopedLimitsError(PiDispatchError):
    """The file cannot be used as it is; the message names what and how to fix it."""


@dataclass(frozen=True)
class ScopeRow:
    scope: str
    caps: WindowCaps
    concurrent: int | None = None


@dataclass(frozen=True)
class ScopedLimits:
    rows: tuple[ScopeRow, ...] = ()

    def row_for(self, scope: str | None) -> ScopeRow | None:
        if scope is None:
            return None
        return next((row for row in self.rows if row.scope == scope), None)

    def canonical(self) -> list[list[object]]:
        """The rows as what they limit, for a digest that two hosts reading the same limits share."""
        return [[row.scope, row.caps.day, row.caps.week, row.caps.month, row.concurrent] for row in self.rows]

    def concurrent_rows(self) -> tuple[ScopeRow, ...]:
        """The rows whose concurrency is leased fleet-wide (what the boot sweep walks)."""
        return tuple(row for row in self.rows if row.concurrent is not None)


def resolved_path(text: str) -> str:
    """An absolute path as Node's `path.resolve` writes it: `.` and `..` folded, doubled and trailing slashes gone."""
    normal = posixpath.normpath(text)
    return "/" + normal.lstrip("/") if normal.startswith("//") else normal


def _scope(value: object, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ScopedLimitsError(f"{where}.scope: a repository (acme/web) or an absolute folder is required")
    scope = unicodedata.normalize("NFC", value.strip())
    if "*" in scope:
        raise ScopedLimitsError(f"{where}.scope {scope!r}: no wildcards; name each repository or folder")
    return resolved_path(scope) if scope.startswith("/") else scope


def _count(value: object, where: str) -> int | None:
    """A safe integer of at least 1 (JSON's `1e3` is 1000), or None when absent or null."""
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer() and math.isfinite(value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= SAFE_INTEGER_MAX:
        raise ScopedLimitsError(f"{where}: a whole number of at least 1 is required, or leave it out")
    return value


def _row(raw: object, index: int) -> ScopeRow:
    where = f"limits[{index}]"
    if not isinstance(raw, Mapping):
        raise ScopedLimitsError(f"{where}: each limit is an object with a scope and at least one cap")
    scope = _scope(raw.get("scope"), where)
    windows = {name: _count(raw.get(name), f"{where}.{name}") for name in WINDOW_FIELDS}
    concurrent = _count(raw.get("concurrent"), f"{where}.concurrent")
    if concurrent is None and all(cap is None for cap in windows.values()):
        raise ScopedLimitsError(f"{where} ({scope}): no limit; give it day, week, month or concurrent")
    return ScopeRow(scope, WindowCaps(**windows), concurrent)


def parse_scoped_limits(raw: object) -> ScopedLimits:
    """The file's limits, or ScopedLimitsError naming the first thing wrong."""
    if not isinstance(raw, Mapping):
        raise ScopedLimitsError('the file must be a JSON object: {"version": 1, "limits": [...]}')
    version = raw.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ScopedLimitsError('version: a whole number is required ("version": 1)')
    if version > SCOPED_LIMITS_VERSION:
        raise ScopedLimitsError(
            f"version {version}: written by a newer pi-dispatch; this build reads version {SCOPED_LIMITS_VERSION}"
            " (upgrade this host, or write the file as version 1)"
        )
    limits = raw.get("limits")
    if not isinstance(limits, list):
        raise ScopedLimitsError('limits: a list of rows is required ("limits": [])')
    rows = tuple(_row(row, index) for index, row in enumerate(limits))
    seen: set[str] = set()
    for row in rows:
        if row.scope in seen:
            raise ScopedLimitsError(f"scope {row.scope!r} is limited twice; keep one row for it")
        seen.add(row.scope)
    return ScopedLimits(rows)


def read_scoped_limits(text: str) -> ScopedLimits:
    try:
        raw = json.loads(text)
    except ValueError as error:
        raise ScopedLimitsError(f"not JSON ({error})") from None
    return parse_scoped_limits(raw)


def job_scope(data: Mapping[str, Any]) -> str | None:
    """The scope a job's limits are looked up by: a forge job's repository as written (never trimmed), a local
    job's folder resolved. None for a job with neither."""
    kind = data.get("kind")
    if kind == LOCAL_KIND:
        folder = data.get("folder")
        if not isinstance(folder, str) or not folder.strip():
            return None
        return resolved_path(posixpath.join("/", unicodedata.normalize("NFC", folder.strip())))
    repo = data.get("repo")
    if kind in FORGES and isinstance(repo, str) and repo:
        return unicodedata.normalize("NFC", repo)
    return None


def is_forge_job(data: Mapping[str, Any]) -> bool:
    return data.get("kind") in FORGES


def concurrency_for(data: Mapping[str, Any], row: ScopeRow | None) -> int | None:
    """How many of the scope's jobs may run at once on a host: one for a local folder (its mutex, always), the
    row's `concurrent` for a forge job, None for no bound."""
    if data.get("kind") == LOCAL_KIND:
        return 1
    return row.concurrent if row is not None else None
