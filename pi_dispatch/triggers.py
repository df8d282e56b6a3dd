"""triggers.json, the part that decides placement: `run.secretsProfile`, `run.secrets`, `run.waitFor`, `on.type`.

`check_triggers` is the typed check, independent of triggers.schema.json; `load_triggers` reads a file
and refuses it with every problem named by its path in the file (`triggers/2/run/waitFor/0`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pi_dispatch.errors import ConfigError, Problem
from pi_dispatch.jobs import JOB_KINDS, TRIGGER_TYPES
from pi_dispatch.names import is_profile_name
from pi_dispatch.schemas import problems
from pi_dispatch.waits import AFTER_INSTANT, WAIT_CONDITION_MAX


@dataclass(frozen=True)
class Trigger:
    """One trigger's placement facts and where it stands in its file."""

    source: str
    index: int
    on_type: str
    run: dict[str, Any]

    @property
    def label(self) -> str:
        return f"{self.source} #{self.index} (on {self.on_type})"


def _condition_problems(path: str, condition: object) -> list[str]:
    if not isinstance(condition, Mapping) or len(condition) != 1:
        return [f"{path}: a condition is an object with exactly one of after or profile"]
    ((key, value),) = condition.items()
    if key == "after" and isinstance(value, str) and AFTER_INSTANT.fullmatch(value):
        return []
    if key == "profile" and is_profile_name(value):
        return []
    return [f"{path}/{key}: {value!r} is not valid"]


def _run_problems(path: str, run: object) -> list[str]:
    if not isinstance(run, Mapping):
        return [f"{path}: run must be an object"]
    found = []
    if "kind" in run and not (isinstance(run["kind"], str) and run["kind"] in JOB_KINDS):
        found.append(f"{path}/kind: {run['kind']!r} is not one of {', '.join(sorted(JOB_KINDS))}")
    if "secretsProfile" in run and not is_profile_name(run["secretsProfile"]):
        found.append(f"{path}/secretsProfile: {run['secretsProfile']!r} is not a profile name")
    secrets = run.get("secrets")
    if "secrets" in run and not (isinstance(secrets, Mapping) and all(isinstance(v, str) for v in secrets.values())):
        found.append(f"{path}/secrets: must map variable names to references")
    if "waitFor" in run:
        conditions = run["waitFor"]
        if not isinstance(conditions, list) or not 1 <= len(conditions) <= WAIT_CONDITION_MAX:
            found.append(f"{path}/waitFor: must list 1 to {WAIT_CONDITION_MAX} conditions")
        else:
            for position, condition in enumerate(conditions):
                found += _condition_problems(f"{path}/waitFor/{position}", condition)
    return found


def check_triggers(document: object) -> list[str]:
    """Every placement problem in a parsed triggers.json, by its path in the document."""
    if not isinstance(document, Mapping) or not isinstance(document.get("triggers"), list):
        return ["(top level): must be an object with a triggers list"]
    found = []
    for index, trigger in enumerate(document["triggers"]):
        path = f"triggers/{index}"
        if not isinstance(trigger, Mapping) or "on" not in trigger or "run" not in trigger:
            found.append(f"{path}: a trigger has on and run")
            continue
        on = trigger["on"]
        if not isinstance(on, Mapping) or not (isinstance(on.get("type"), str) and on["type"] in TRIGGER_TYPES):
            found.append(f"{path}/on/type: must be one of {', '.join(sorted(TRIGGER_TYPES))}")
        found += _run_problems(f"{path}/run", trigger["run"])
    return found


def load_triggers(path: Path, label: str | None = None) -> list[Trigger]:
    """The triggers of one file, or ConfigError naming every problem in it; label names the file in findings."""
    source = label or str(path)
    fix = "see docs/multi-host.md for the trigger fields that decide placement"
    try:
        document = json.loads(path.read_bytes())
    except (OSError, ValueError) as error:
        raise ConfigError([Problem(source, f"cannot be read as JSON ({error})", source, "fix the file")]) from error
    found = problems("triggers", document, source)
    if found or check_triggers(document):
        own = [
            Problem(message.split(":", 1)[0], message.split(": ", 1)[-1], source, fix)
            for message in check_triggers(document)
        ]
        raise ConfigError(found or own)
    return [
        Trigger(source, index, str(trigger["on"]["type"]), dict(trigger["run"]))
        for index, trigger in enumerate(document["triggers"])
    ]
