"""Cron: what a worker's triggers file schedules, and the `fpCron` its row publishes. Pure.

Each `cron` entry of PI_TRIGGERS_FILE becomes one BullMQ job scheduler, its id the entry's `on.id`, whose jobs
are local jobs (the contract's §4.2 data and options) named `repeat:<id>:<millis>` by BullMQ itself.

`fpCron` is the reference's `cronFingerprint`: the first 16 hex of the sha256 of a canonical JSON (object keys
sorted recursively, scalars written as `JSON.stringify` writes them, so `3.0` is `3`) of
`{tz, schedules: [{schedulerId, pattern, run}]}`, over the entries as authored, before any placement. `run` is
the reference parser's shape of a cron entry's run: the fields it always returns hash as `null` when absent,
as `undefined` does there. Cron disabled (no file) publishes "" and has no opinion; an empty list is the
opinion "schedule nothing" and gets a real fingerprint.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from pi_dispatch.core.errors import ConfigError, Problem
from pi_dispatch.core.jobs import LOCAL_KIND
from pi_dispatch.core.jscompat import js_json, js_sorted
from pi_dispatch.triggers.cronpatterns import why_refused

if TYPE_CHECKING:
    from pi_dispatch.triggers.file import Trigger

CRON: Final = "cron"
LOCAL_JOB_NAME: Final = "local"
DAY_S: Final = 86_400
LOCAL_JOB_OPTIONS: Final[Mapping[str, Any]] = {
    "attempts": 2,
    "backoff": {"type": "exponential", "delay": 60_000},
    "removeOnComplete": {"age": DAY_S},
    "removeOnFail": {"age": 7 * DAY_S},
}
# A cron entry's run as the reference's parser returns it: these keys always, the others only when set.
AUTHORED_ALWAYS: Final = (
    "kind",
    "folder",
    "flow",
    "task",
    "provider",
    "model",
    "maxTurns",
    "github",
    "packages",
    "image",
    "resume",
)
AUTHORED_WHEN_SET: Final = (
    "command",
    "skillsDir",
    "secrets",
    "secretsProfile",
    "backend",
    "excludeTools",
    "models",
    "maxCostUsd",
    "portfolio",
)
# A local job's data keys in the reference's order; the ones a trigger leaves unset are left out.
LOCAL_DATA_KEYS: Final = (
    "folder",
    "flow",
    "task",
    "command",
    "provider",
    "model",
    "maxTurns",
    "github",
    "packages",
    "image",
    "backend",
    "excludeTools",
    "models",
    "maxCostUsd",
    "skillsDir",
    "secrets",
    "secretsProfile",
    "resume",
)


def js_value(value: object) -> Any:
    """A JSON value as JavaScript holds it: a float that is a whole number is that integer (`3.0` is `3`)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, Mapping):
        return {str(key): js_value(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [js_value(item) for item in value]
    return value


def canonical_json(value: object) -> str:
    """The reference's canonical form: object keys sorted (by UTF-16 code unit) at every depth, no spaces."""
    if isinstance(value, Mapping):
        keys = js_sorted(str(key) for key in value)
        return "{" + ",".join(f"{js_json(key)}:{canonical_json(value[key])}" for key in keys) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(canonical_json(item) for item in value) + "]"
    return js_json(value)


def fingerprint(value: object) -> str:
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class Schedule:
    """One cron entry as a BullMQ job scheduler: its id, its pattern, and the data each of its jobs gets."""

    scheduler_id: str
    pattern: str
    data: Mapping[str, Any]


def cron_entries(triggers: Iterable[Trigger]) -> list[Trigger]:
    return [trigger for trigger in triggers if trigger.on_type == CRON]


def authored_cron(triggers: Iterable[Trigger]) -> list[dict[str, Any]]:
    """The cron set as authored, what two hosts compare: `[{schedulerId, pattern, run}]` in file order."""
    return [
        {
            "schedulerId": entry.on["id"],
            "pattern": entry.on["pattern"],
            "run": {key: entry.run.get(key) for key in AUTHORED_ALWAYS}
            | {key: entry.run[key] for key in AUTHORED_WHEN_SET if key in entry.run},
        }
        for entry in cron_entries(triggers)
    ]


def cron_fingerprint(authored: Sequence[Mapping[str, Any]] | None, tz: str) -> str:
    """The row's `fpCron`: "" when cron is disabled (no opinion), else the fingerprint of the set in its zone."""
    if authored is None:
        return ""
    return fingerprint(js_value({"tz": tz, "schedules": [dict(schedule) for schedule in authored]}))


def schedules_of(triggers: Iterable[Trigger]) -> list[Schedule]:
    """Each cron entry's scheduler: its local job data names the trigger (`{id, pattern}`) it came from."""
    return [
        Schedule(
            str(entry.on["id"]),
            str(entry.on["pattern"]),
            js_value(
                {"kind": LOCAL_KIND}
                | {key: entry.run[key] for key in LOCAL_DATA_KEYS if entry.run.get(key) is not None}
                | {"trigger": {"id": entry.on["id"], "pattern": entry.on["pattern"]}}
            ),
        )
        for entry in cron_entries(triggers)
    ]


def zones_disagree(my_zone: str, peer_zones: Iterable[object]) -> list[str]:
    """The zones in play when they differ (this host's and its live peers'), else []. A peer that publishes no
    zone has no say: it cannot be shown to disagree."""
    zones = {my_zone} | {zone for zone in peer_zones if isinstance(zone, str)}
    zones.discard("")
    return sorted(zones) if len(zones) > 1 else []


def pattern_problems(patterns: Mapping[int, str], source: str) -> list[Problem]:
    """A problem, naming the entry and the field, for each pattern BullMQ's cron parser cannot read."""
    from pi_dispatch.triggers.file import FIX

    return [
        Problem(f"trigger {index} on.pattern", f"is not a cron pattern: {why}", source, FIX)
        for index, pattern in patterns.items()
        if (why := why_refused(pattern)) is not None
    ]


def check_patterns(triggers: list[Trigger], source: str) -> None:
    """Refuse, naming the entry, a pattern BullMQ's cron parser cannot read: it would never fire."""
    patterns = {entry.index: str(entry.on["pattern"]) for entry in cron_entries(triggers)}
    if found := pattern_problems(patterns, source):
        raise ConfigError(found)


def load_cron(path: Path, label: str) -> tuple[bytes, list[Trigger]]:
    """The triggers file's bytes and triggers, its cron patterns checked. Raises ConfigError naming every problem
    of every entry at once (the entries' own and their patterns'). The parser is loaded here, by a host with a
    file: a worker without one never loads it."""
    from pi_dispatch.triggers.file import authored_patterns, collect_triggers, read_triggers_file

    text = read_triggers_file(path, label)
    triggers, problems = collect_triggers(text, label)
    if problems := problems + pattern_problems(authored_patterns(text), label):
        raise ConfigError(sorted(problems, key=lambda problem: _entry_order(problem.subject)))
    return text, triggers


def _entry_order(subject: str) -> tuple[int, str]:
    number = subject.split(" ")[1] if subject.startswith("trigger ") else ""
    return (int(number) if number.isdigit() else -1, subject)
