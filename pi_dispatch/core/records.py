"""The run record: what one job's run leaves behind, field for field as the reference writes it.

Built as an explicit literal from the job and its outcome; it never spreads job data, so it holds no
attacker-chosen string. Nested telemetry is rebuilt and validated rather than copied. Pure.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from typing import Any, Final

from pi_dispatch.core.jobs import FORGE_KINDS, LOCAL_KIND, TRIGGER_TYPES, target_separator
from pi_dispatch.core.jscompat import MISSING, get, js_string, nullish
from pi_dispatch.core.money import read_dollars
from pi_dispatch.core.reasons import REASONS
from pi_dispatch.core.runusage import read_context, read_tokens, read_usage

# A reason that is not one of ours is recorded as this rather than copied, because it could carry text
# from a job's payload.
UNRECOGNIZED_REASON: Final = "unrecognized"

_USAGE_ID: Final = re.compile(r"[a-z0-9][a-z0-9._:/-]{0,63}")  # a session's reason, as a Node record may word it


def _integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _target(kind: object, data: Mapping[str, Any]) -> str | None:
    if kind == LOCAL_KIND:
        folder = data.get("folder")
        return "local:" + posixpath.basename(js_string(folder).rstrip("/")) if not nullish(folder) else "local:"
    if isinstance(kind, str) and kind in FORGE_KINDS:
        target = get(data, "target")
        return (
            js_string(data.get("repo", MISSING))
            + target_separator(kind, get(target, "type"))
            + js_string(get(target, "number"))
        )
    return None


def _session(value: object) -> dict[str, Any] | None:
    if not isinstance(value, Mapping) or not isinstance(value.get("resumed"), bool):
        return None
    reason = value.get("reason")
    size = value.get("bytes")
    return {
        "resumed": value["resumed"],
        "reason": reason if isinstance(reason, str) and _USAGE_ID.fullmatch(reason) else None,
        "bytes": size if _integer(size) else None,
    }


def _reason(value: object) -> str | None:
    if nullish(value):
        return None
    return value if isinstance(value, str) and value in REASONS else UNRECOGNIZED_REASON


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def build_record(
    *,
    job_id: object,
    job_name: str | None,
    data: Mapping[str, Any] | None,
    attempts_made: int,
    result: Mapping[str, Any] | None,
    error: Mapping[str, Any] | None,
    started_at: str | None,
    ended_at: str | None,
    host: str,
) -> dict[str, Any]:
    """The run record, in the reference's field order, with `host` stamped last."""
    job_data: Mapping[str, Any] = data if isinstance(data, Mapping) else {}
    kind = job_data.get("kind") if not nullish(job_data.get("kind", MISSING)) else job_name
    source: Mapping[str, Any] = result if result is not None else (error if error is not None else {})
    matched = get(get(job_data, "trigger"), "matched")
    trigger_type = get(matched, "type")
    return {
        "jobId": job_id,
        "kind": kind if isinstance(kind, str) else None,
        "target": _target(kind, job_data),
        "flow": _text_or_none(job_data.get("flow")),
        "startedAt": started_at,
        "endedAt": ended_at,
        "outcome": _text_or_none(result.get("outcome")) if result is not None else "failed",
        "reason": _reason(source.get("reason")),
        "exitCode": _int_or_none(source.get("exitCode")),
        "turns": _int_or_none(source.get("turns")),
        "tokens": read_tokens(source.get("tokens")),
        "usage": read_usage(source.get("usage")),
        "provider": _text_or_none(source.get("provider")),
        "model": _text_or_none(source.get("model")),
        "budgetReserved": source.get("budgetReserved") if isinstance(source.get("budgetReserved"), bool) else None,
        "attempt": attempts_made,
        "parentJobId": _text_or_none(job_data.get("parentJobId")),
        "chainDepth": _int_or_none(job_data.get("chainDepth")),
        "chainRefused": _int_or_none(source.get("chainRefused")),
        "replica": _int_or_none(job_data.get("replica")),
        "replicas": _int_or_none(job_data.get("replicas")),
        "triggerIndex": _int_or_none(get(matched, "index")),
        "triggerType": trigger_type if isinstance(trigger_type, str) and trigger_type in TRIGGER_TYPES else None,
        "session": _session(source.get("session")),
        "context": read_context(source.get("context")),  # this port's: how full the agent's context window ended
        "host": host,
        "dollars": read_dollars(source.get("dollars")),  # what the run held and was charged (micro-dollars)
    }


_TEXT, _WHOLE, _OBJECT = (str,), (int,), (dict,)
# Each field's type when it is not null, and whether a record must carry it (jobId, attempt and host have
# rules of their own below, and are always required).
_FIELDS: Final[dict[str, tuple[tuple[type, ...], bool]]] = {
    "kind": (_TEXT, True),
    "target": (_TEXT, True),
    "flow": (_TEXT, True),
    "startedAt": (_TEXT, True),
    "endedAt": (_TEXT, True),
    "outcome": (_TEXT, True),
    "reason": (_TEXT, True),
    "exitCode": (_WHOLE, True),
    "turns": (_WHOLE, False),
    "tokens": (_OBJECT, False),
    "usage": (_OBJECT, False),
    "provider": (_TEXT, False),
    "model": (_TEXT, False),
    "budgetReserved": ((bool,), False),
    "parentJobId": (_TEXT, False),
    "chainDepth": (_WHOLE, False),
    "chainRefused": (_WHOLE, False),
    "replica": (_WHOLE, False),
    "replicas": (_WHOLE, False),
    "triggerIndex": (_WHOLE, False),
    "triggerType": (_TEXT, False),
    "session": (_OBJECT, False),
    "context": (_OBJECT, False),
    "dollars": (_OBJECT, False),
}
REQUIRED_FIELDS: Final = ("jobId", *(field for field, (_, required) in _FIELDS.items() if required), "attempt", "host")


def check_run_record(record: object) -> list[str]:
    """Why a run record breaks the wire shape, if it does. Unknown fields are allowed."""
    if not isinstance(record, Mapping):
        return ["a record is an object"]
    found = [f"{field} is missing" for field in REQUIRED_FIELDS if field not in record]
    for field, (allowed, _) in _FIELDS.items():
        value = record.get(field)
        if value is None:
            continue
        if not isinstance(value, allowed) or (allowed == _WHOLE and isinstance(value, bool)):
            found.append(f"{field}: {value!r} has the wrong type")
    job_id, attempt, host = record.get("jobId"), record.get("attempt"), record.get("host")
    if "jobId" in record and (isinstance(job_id, bool) or not isinstance(job_id, str | int | float)):
        found.append("jobId: must be a string or a number")
    if "attempt" in record and (not _integer(attempt) or attempt < 0):  # type: ignore[operator]
        found.append("attempt: must be a whole number, 0 or more")
    if "host" in record and not (isinstance(host, str) and host):
        found.append("host: must name the host")
    return found
