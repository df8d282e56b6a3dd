"""Scoped limits (`PI_SCOPED_LIMITS_FILE`), the reference's version 1 and 2 files: per repository or local folder,
caps on the starts of a day, week or month (each a ledger, `core/budget.py`) and on how many of its jobs run at
once; from version 2, caps on the dollars it spends (`dayUsd`, `weekUsd`, `monthUsd`), rows for one forge's
repository (`github:acme/web`) and rows for a model's spend (`model:openai/gpt-5`, dollars only).

`{"version": 2, "limits": [{"scope": "acme/web", "day": 20, "concurrent": 1, "dayUsd": "5.00"},
{"scope": "/srv/site", "week": 5}, {"scope": "model:openai/gpt-5", "monthUsd": "100"}]}`

A row's scope is matched by exact string equality against the job's: a forge job's `<forge>:<repo>` first, then its
`repo`, or a local job's folder resolved. Every key a row leads to is named by the row's own scope string. What the
reference refuses is refused here too, naming the row and the field; unknown keys are dropped, as version 1 and 2
readers do. Pure.
"""

from __future__ import annotations

import json
import math
import posixpath
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from pi_dispatch.core.budget import WINDOWS, WindowCaps
from pi_dispatch.core.errors import PiDispatchError
from pi_dispatch.core.forges import FORGES
from pi_dispatch.core.money import parse_usd_micros
from pi_dispatch.core.runusage import MODEL_REF
from pi_dispatch.core.scopes import job_qualified_scope, qualified_prefix, qualified_scope

SCOPED_LIMITS_VERSION: Final = 2  # the newest version of the file this build reads
SAFE_INTEGER_MAX: Final = 2**53 - 1  # JavaScript's: a Node host reads the same file
WINDOW_FIELDS: Final = tuple(spec.row_field for spec in WINDOWS)
DOLLAR_FIELDS: Final = tuple(spec.usd_field for spec in WINDOWS)  # version 2
LOCAL_KIND: Final = "local"
MODEL_PREFIX: Final = "model:"
PROJECT_PREFIX: Final = "project:"
NO_CAPS: Final = WindowCaps()
FOLD_MODEL: Final = "other/other"  # the exit line's fold row: never a model of its own


class ScopedLimitsError(PiDispatchError):
    """The file cannot be used as it is; the message names what and how to fix it."""


@dataclass(frozen=True)
class ScopeRow:
    scope: str
    caps: WindowCaps
    concurrent: int | None = None
    dollars: WindowCaps = NO_CAPS  # micro-dollars (version 2)

    @property
    def model(self) -> str | None:
        """A model row's `provider/model`, lowercased (how its key is named and jobs' models compared)."""
        return self.scope.removeprefix(MODEL_PREFIX).lower() if self.scope.startswith(MODEL_PREFIX) else None


@dataclass(frozen=True)
class ScopedLimits:
    rows: tuple[ScopeRow, ...] = ()

    def row_for(self, scope: str | None) -> ScopeRow | None:
        if scope is None or scope.startswith(MODEL_PREFIX):
            return None
        return next((row for row in self.rows if row.scope == scope), None)

    def row_of(self, data: Mapping[str, Any]) -> ScopeRow | None:
        """The row a job is limited by: for a forge job its `<forge>:<repo>` row first, then its repository's."""
        qualified = job_qualified_scope(data.get("kind"), data.get("repo")) if is_forge_job(data) else None
        return self.row_for(qualified) or self.row_for(job_scope(data))

    def model_rows(self) -> tuple[ScopeRow, ...]:
        return tuple(row for row in self.rows if row.model is not None)

    def dollar_rows(self) -> tuple[ScopeRow, ...]:
        return tuple(row for row in self.rows if row.dollars.active())

    def canonical(self) -> list[list[object]]:
        """The rows as what they limit, for a digest that two hosts reading the same limits share."""
        dollars = [list(row.dollars.values()) if row.dollars.active() else [] for row in self.rows]
        return [
            [row.scope, *row.caps.values(), row.concurrent, *spend]
            for row, spend in zip(self.rows, dollars, strict=True)
        ]

    def concurrent_rows(self) -> tuple[ScopeRow, ...]:
        """The rows whose concurrency is leased fleet-wide (what the boot sweep walks)."""
        return tuple(row for row in self.rows if row.concurrent is not None)


def resolved_path(text: str) -> str:
    """An absolute path as Node's `path.resolve` writes it: `.` and `..` folded, doubled and trailing slashes gone."""
    normal = posixpath.normpath(text)
    return "/" + normal.lstrip("/") if normal.startswith("//") else normal


def _scope(value: object, where: str, version: int) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ScopedLimitsError(f"{where}.scope: a repository (acme/web) or an absolute folder is required")
    scope = unicodedata.normalize("NFC", value.strip())
    if "*" in scope:
        raise ScopedLimitsError(f"{where}.scope {scope!r}: no wildcards; name each repository or folder")
    if scope.startswith("/"):
        return resolved_path(scope)
    prefix = qualified_prefix(scope)
    if version < 2 or prefix is None:
        return scope
    if scope.startswith(MODEL_PREFIX):
        return _model_scope(scope, where)
    if scope.startswith(PROJECT_PREFIX):
        raise ScopedLimitsError(
            f"{where}.scope {scope!r}: project rows need a projects file, which this build does "
            "not read; limit the project's repositories or folders instead"
        )
    if prefix.strip().lower() in ("model", "models", "project", "projects"):
        raise ScopedLimitsError(f"{where}.scope {scope!r}: write model:<provider>/<model> (lowercase, no spaces)")
    try:
        return qualified_scope(scope)
    except ValueError as error:
        raise ScopedLimitsError(f"{where}.scope {scope!r}: {error}") from None


def _model_scope(scope: str, where: str) -> str:
    model = scope.removeprefix(MODEL_PREFIX)
    provider, _, name = model.partition("/")
    if not provider or not name or MODEL_REF.fullmatch(model.lower()) is None:
        raise ScopedLimitsError(f"{where}.scope {scope!r}: write model:<provider>/<model>, as a job's models list it")
    if model.lower() == FOLD_MODEL:
        raise ScopedLimitsError(f"{where}.scope {scope!r}: other/other is the exit line's fold row, not a model")
    return MODEL_PREFIX + model


def _dollars(value: object, where: str) -> int | None:
    """An amount of dollars in micro-dollars (the reference's grammar), or None when absent or null."""
    if value is None:
        return None
    if (micros := parse_usd_micros(value)) is None:
        raise ScopedLimitsError(f'{where}: an amount of dollars such as "5.00" is required (above 0, six decimals)')
    return micros


def _count(value: object, where: str) -> int | None:
    """A safe integer of at least 1 (JSON's `1e3` is 1000), or None when absent or null."""
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer() and math.isfinite(value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= SAFE_INTEGER_MAX:
        raise ScopedLimitsError(f"{where}: a whole number of at least 1 is required, or leave it out")
    return value


def _row(raw: object, index: int, version: int) -> ScopeRow:
    where = f"limits[{index}]"
    if not isinstance(raw, Mapping):
        raise ScopedLimitsError(f"{where}: each limit is an object with a scope and at least one cap")
    scope = _scope(raw.get("scope"), where, version)
    windows = {name: _count(raw.get(name), f"{where}.{name}") for name in WINDOW_FIELDS}
    concurrent = _count(raw.get("concurrent"), f"{where}.concurrent")
    spend = [_dollars(raw.get(name), f"{where}.{name}") if version >= 2 else None for name in DOLLAR_FIELDS]
    dollars = WindowCaps(*spend)
    if scope.startswith(MODEL_PREFIX) and (concurrent is not None or any(windows.values())):
        raise ScopedLimitsError(f"{where} ({scope}): a model row caps dollars only (dayUsd, weekUsd, monthUsd)")
    if concurrent is None and all(cap is None for cap in windows.values()) and not dollars.active():
        more = ", dayUsd, weekUsd, monthUsd" if version >= 2 else ""
        raise ScopedLimitsError(f"{where} ({scope}): no limit; give it day, week, month{more} or concurrent")
    return ScopeRow(scope, WindowCaps(**windows), concurrent, dollars)


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
            f" (upgrade this host, or write the file as version {SCOPED_LIMITS_VERSION})"
        )
    limits = raw.get("limits")
    if not isinstance(limits, list):
        raise ScopedLimitsError('limits: a list of rows is required ("limits": [])')
    rows = tuple(_row(row, index, version) for index, row in enumerate(limits))
    seen: set[str] = set()
    for row in rows:
        same = row.scope.lower() if row.model is not None else row.scope
        if same in seen:
            raise ScopedLimitsError(f"scope {row.scope!r} is limited twice; keep one row for it")
        seen.add(same)
    for row in rows:
        kind, _, repo = row.scope.partition(":")
        if kind in FORGES and repo in seen:
            raise ScopedLimitsError(f"scope {row.scope!r} and {repo!r} both limit one repository; keep one of them")
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
