"""triggers.json, read as the reference reads it: one parser for the receiver, the worker and the audit. Pure
apart from `load_triggers`, which reads the file.

`{"triggers": [{"on": {...}, "run": {...}}, ...]}`. `on.type` is cron, label, comment, pull_request or issue;
`run.kind` is `local` for cron and a forge for the rest. Actions are each forge's own words (table below).
Every entry keeps its raw index (cron and spent entries counted), because jobs and records name triggers by it.
A spent one-shot (`on.disarmed`, written by the worker) is validated in full, then becomes type `disarmed`,
which nothing matches. A refusal names the trigger's index and the field, never the value.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pi_dispatch.core.errors import ConfigError, Problem
from pi_dispatch.core.forges import FORGES
from pi_dispatch.core.jobs import FORGE_KINDS, JOB_KINDS, LOCAL_KIND, PR_CLOSE_ACTION, TRIGGER_TYPES
from pi_dispatch.core.jscompat import is_integer
from pi_dispatch.triggers.run import ID_CHARSET, run_fields
from pi_dispatch.triggers.terms import Checks, Refusal, Refusals, is_text

DISARMED: Final = "disarmed"
# Each forge's own words (`core/forges.py`): its pull request and issue actions, and the pull request action that is
# a label being applied (a rule naming it is gated by its label predicate alone).
PR_ACTIONS: Final[Mapping[str, tuple[str, ...]]] = {kind: words.pr_actions for kind, words in FORGES.items()}
ISSUE_ACTIONS: Final[Mapping[str, tuple[str, ...]]] = {
    kind: words.issue_actions for kind, words in FORGES.items() if words.issue_actions is not None
}
PR_LABEL_ACTION: Final[Mapping[str, str]] = {
    kind: words.pr_label for kind, words in FORGES.items() if words.pr_label is not None
}
REVIEW_ACTION: Final = "review_submitted"
REVIEW_STATES: Final = ("approved", "changes_requested", "commented")
FIX: Final = "see docs/triggers.md for the triggers file format"


@dataclass(frozen=True)
class Trigger:
    """One entry of a triggers file, normalized: only validated fields, in the reference's shape."""

    source: str
    index: int
    on: Mapping[str, Any]
    run: Mapping[str, Any]

    @property
    def on_type(self) -> str:
        return str(self.on["type"])

    @property
    def label(self) -> str:
        return f"{self.source} #{self.index} (on {self.on_type})"


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            # JSON keeps the last value: the file that was reviewed and the file that runs would differ.
            raise ValueError(f"duplicate key {json.dumps(key)}")
        seen[key] = value
    return seen


def _predicate(on: Mapping[str, Any], require_positive: bool) -> dict[str, Any]:
    for key in ("any", "all", "none"):
        selector = on.get(key)
        if key in on and not (isinstance(selector, list) and all(is_text(name) for name in selector)):
            raise Refusal(f"on.{key}", "must be an array of non-empty label names")
    if require_positive and not (on.get("any") or on.get("all")):
        raise Refusal("on.any", "needs at least one positive selector (on.any or on.all)")
    return {key: list(on[key]) for key in ("any", "all", "none") if key in on}


def _close_fields(on: Mapping[str, Any], run: Mapping[str, Any], capable: bool, on_type: str) -> dict[str, Any]:
    """`on.number`, `on.once` and `on.disarmed`: legal only on a close rule."""
    found: dict[str, Any] = {}
    for key in ("number", "once", "disarmed"):
        if key in on and not capable:
            where = "a cron trigger" if on_type == "cron" else f"{on_type} triggers"
            raise Refusal(f"on.{key}", f"is only available on a close rule, not on {where}")
    if "number" in on:
        if not is_integer(on["number"]) or on["number"] < 1:
            raise Refusal("on.number", "must be a whole number, 1 or more: the item number the forge assigns")
        found["number"] = int(on["number"])
    if "once" in on:
        if not isinstance(on["once"], bool):
            raise Refusal("on.once", "must be true or false when present")
        if on["once"] and "number" not in on:
            raise Refusal("on.once", "requires on.number: a one-shot names the item that spends it")
        if on["once"] and "replicas" in run:
            raise Refusal("on.once", "cannot be combined with run.replicas")
        found["once"] = on["once"]
    if "disarmed" in on:
        _check_disarmed(on["disarmed"], once=on.get("once") is True)
    return found


def _check_disarmed(mark: object, *, once: bool) -> None:
    """`on.disarmed`: the mark a spent one-shot carries (when, and the job that spent it)."""
    if not isinstance(mark, Mapping) or set(mark) - {"at", "jobId"} or not is_text(mark.get("at")):
        raise Refusal("on.disarmed", 'must be an object with a non-empty "at" (and optionally "jobId")')
    if "jobId" in mark and not is_text(mark["jobId"]):
        raise Refusal("on.disarmed.jobId", "must be a non-empty string when present")
    if not once:
        raise Refusal("on.disarmed", "is only meaningful beside on.once: true")


def _actions(on: Mapping[str, Any], allowed: tuple[str, ...], what: str) -> list[str]:
    actions = on.get("action")
    if not isinstance(actions, list) or not actions:
        raise Refusal("on.action", f"{what} on.action must be a non-empty array")
    for position, action in enumerate(actions):
        if action not in allowed:
            raise Refusal(f"on.action[{position}]", f"is not one of this forge's words ({'|'.join(allowed)})")
    return [str(action) for action in actions]


def _review_state(on: Mapping[str, Any], actions: list[str], kind: str) -> list[str] | None:
    if "reviewState" not in on:
        return None
    states = on["reviewState"]
    if not FORGES[kind].review_verdicts:
        reporting = "|".join(name for name, words in FORGES.items() if words.review_verdicts)
        raise Refusal("on.reviewState", f"is {reporting}-only: no other forge reports a review verdict")
    if REVIEW_ACTION not in actions:
        raise Refusal("on.reviewState", f"requires on.action to include {REVIEW_ACTION}")
    if not isinstance(states, list) or not states or any(state not in REVIEW_STATES for state in states):
        raise Refusal("on.reviewState", f"must be a non-empty array of {'|'.join(REVIEW_STATES)}")
    return [str(state) for state in states]


def _has_predicate(on: Mapping[str, Any]) -> bool:
    return any(key in on for key in ("any", "all", "none"))


def _pull_request_on(on: Mapping[str, Any], run: Mapping[str, Any], kind: str) -> dict[str, Any]:
    actions = _actions(on, PR_ACTIONS[kind], "pull_request")
    close_word = PR_CLOSE_ACTION.get(kind)
    closing = close_word is not None and close_word in actions
    if closing and any(action != close_word for action in actions):
        raise Refusal("on.action", f"cannot mix {close_word} with other actions: split it into two entries")
    checks, predicate = Checks(), None
    review = checks.take(lambda: _review_state(on, actions, kind))
    if (closing or not FORGES[kind].pr_label_predicates) and _has_predicate(on):
        what = "a close rule" if closing else f"a {kind} pull_request rule"
        checks.refused.append(Refusal("on.any", f"{what} cannot carry a label predicate"))
    else:
        predicate = checks.take(lambda: _predicate(on, PR_LABEL_ACTION.get(kind) in actions))
    close = checks.take(lambda: _close_fields(on, run, closing, "pull_request"))
    checks.settle()
    normalized: dict[str, Any] = {"type": "pull_request", "action": actions}
    if review is not None:
        normalized["reviewState"] = review
    return normalized | (predicate or {}) | (close or {})


def _issue_on(on: Mapping[str, Any], run: Mapping[str, Any], kind: str) -> dict[str, Any]:
    if kind not in ISSUE_ACTIONS:
        raise Refusal("on.type", f"an issue trigger is not yet covered for {kind}")
    checks = Checks()
    actions = checks.take(lambda: _actions(on, ISSUE_ACTIONS[kind], "issue"))
    if _has_predicate(on):
        checks.refused.append(Refusal("on.any", "an issue trigger cannot carry a label predicate"))
    close = checks.take(lambda: _close_fields(on, run, True, "issue"))
    checks.settle()
    return {"type": "issue", "action": actions} | (close or {})


def _cron_on(on: Mapping[str, Any], run: Mapping[str, Any], cron_ids: set[str]) -> dict[str, Any]:
    ident, pattern, checks = on.get("id"), on.get("pattern"), Checks()
    if not is_text(ident) or ":" in str(ident) or not ID_CHARSET.fullmatch(str(ident)):
        checks.refused.append(
            Refusal("on.id", "must be a non-empty string of letters, digits, dot, dash or underscore (no :)")
        )
    elif ident in cron_ids:
        checks.refused.append(Refusal("on.id", "repeats another cron trigger's id: ids must be unique"))
    else:
        cron_ids.add(str(ident))
    if not is_text(pattern) or len(str(pattern).split()) not in (5, 6):
        checks.refused.append(Refusal("on.pattern", "must be a cron pattern of 5 or 6 space-separated fields"))
    checks.take(lambda: _close_fields(on, run, False, "cron"))
    checks.settle()
    return {"type": "cron", "id": ident, "pattern": pattern}


def _label_on(on: Mapping[str, Any], run: Mapping[str, Any], kind: str) -> dict[str, Any]:
    checks = Checks()
    predicate = checks.take(lambda: _predicate(on, True))
    checks.take(lambda: _close_fields(on, run, False, "label"))
    checks.settle()
    return {"type": "label", **(predicate or {})}


def _comment_on(on: Mapping[str, Any], run: Mapping[str, Any], kind: str) -> dict[str, Any]:
    checks = Checks()
    if not is_text(on.get("phrase")):
        checks.refused.append(Refusal("on.phrase", "must be a non-empty string"))
    checks.take(lambda: _close_fields(on, run, False, "comment"))
    checks.settle()
    return {"type": "comment", "phrase": on["phrase"]}


_WEBHOOK_ON: Final = {"label": _label_on, "comment": _comment_on, "issue": _issue_on, "pull_request": _pull_request_on}


def _entry(entry: object, comment_kinds: set[str], cron_ids: set[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """One entry normalized, or Refusals: its shape, type and kind first (nothing else can be read without them),
    then its `on` and its `run` each checked, so a bad selector never hides a bad run field."""
    if not isinstance(entry, Mapping):
        raise Refusal("(entry)", "must be an object with on and run")
    on, run = entry.get("on"), entry.get("run")
    if not isinstance(on, Mapping) or not isinstance(run, Mapping):
        raise Refusal("on" if not isinstance(on, Mapping) else "run", "must be an object")
    on_type, kind = on.get("type"), run.get("kind")
    if on_type not in TRIGGER_TYPES:
        raise Refusal("on.type", f"must be one of {'|'.join(sorted(TRIGGER_TYPES))}")
    if kind not in JOB_KINDS:
        raise Refusal("run.kind", f"must be one of {'|'.join(sorted(JOB_KINDS))}")
    if on_type == "cron" and kind != LOCAL_KIND:
        raise Refusal("run.kind", 'a cron trigger has no delivery to act on: run.kind must be "local"')
    if on_type != "cron" and kind not in FORGE_KINDS:
        raise Refusal("run.kind", f"a {on_type} trigger is webhook-driven: use one of {'|'.join(sorted(FORGE_KINDS))}")
    checks = Checks()
    normalized = checks.take(lambda: _on(on, run, str(kind), comment_kinds=comment_kinds, cron_ids=cron_ids))
    fields = checks.take(lambda: run_fields(on, run, str(on_type)))
    checks.settle()
    assert normalized is not None and fields is not None
    if on_type != "cron" and "disarmed" in on:
        return {"type": DISARMED}, {}
    return normalized, fields


def _on(
    on: Mapping[str, Any], run: Mapping[str, Any], kind: str, *, comment_kinds: set[str], cron_ids: set[str]
) -> dict[str, Any]:
    on_type = str(on["type"])
    if on_type == "cron":
        return _cron_on(on, run, cron_ids)
    normalized = _WEBHOOK_ON[on_type](on, run, kind)
    if on_type == "comment":
        if kind in comment_kinds:  # the receiver holds one comment rule per forge: a second would never fire
            raise Refusal("on.type", f"at most one {kind} comment trigger is allowed")
        comment_kinds.add(kind)
    return normalized


def parse_triggers(text: str | bytes, source: str) -> list[Trigger]:
    """Every entry of a triggers file, normalized, or ConfigError naming each refused entry's index and field."""
    triggers, problems = collect_triggers(text, source)
    if problems:
        raise ConfigError(problems)
    return triggers


def _json_refusal(error: ValueError | RecursionError) -> str:
    if isinstance(error, json.JSONDecodeError):
        return f"is not valid JSON at line {error.lineno}, column {error.colno} ({error.msg})"
    return str(error) if str(error).startswith("duplicate key") else "is not valid JSON"


def collect_triggers(text: str | bytes, source: str) -> tuple[list[Trigger], list[Problem]]:
    """The entries that parse, and a problem for each that does not (every entry is tried)."""
    try:
        document = json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except (ValueError, RecursionError) as error:
        return [], [Problem("triggers file", _json_refusal(error), source, "fix the file")]
    entries = document.get("triggers") if isinstance(document, Mapping) else None
    if not isinstance(entries, list):
        return [], [Problem("triggers file", 'must be an object with a "triggers" array', source, FIX)]
    comment_kinds: set[str] = set()
    cron_ids: set[str] = set()
    triggers: list[Trigger] = []
    problems: list[Problem] = []
    for index, entry in enumerate(entries):
        try:
            on, run = _entry(entry, comment_kinds, cron_ids)
        except (Refusal, Refusals) as refused:
            for refusal in refused.refusals if isinstance(refused, Refusals) else [refused]:
                problems.append(Problem(f"trigger {index} {refusal.field}", refusal.message, source, FIX))
            continue
        triggers.append(Trigger(source, index, on, run))
    return triggers, problems


def authored_patterns(text: str | bytes) -> dict[int, str]:
    """Each cron entry's pattern as written, by index, whether or not the rest of its entry parses (so a file's
    every problem is said in one run); {} when the text is not a triggers document."""
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):
        return {}
    entries = document.get("triggers") if isinstance(document, Mapping) else None
    return {
        index: entry["on"]["pattern"]
        for index, entry in enumerate(entries if isinstance(entries, list) else [])
        if isinstance(entry, Mapping)
        and isinstance(entry.get("on"), Mapping)
        and entry["on"].get("type") == "cron"
        and isinstance(entry["on"].get("pattern"), str)
    }


def read_triggers(path: Path, label: str | None = None) -> tuple[bytes, list[Trigger]]:
    """A triggers file's bytes and its triggers; label names the file in messages and findings (default: the path)."""
    return (text := read_triggers_file(path, label)), parse_triggers(text, label or str(path))


def read_triggers_file(path: Path, label: str | None = None) -> bytes:
    """A triggers file's bytes, or ConfigError saying why it cannot be read."""
    source = label or str(path)
    try:
        text = path.read_bytes()
    except OSError as error:
        reason = "does not exist" if isinstance(error, FileNotFoundError) else f"cannot be read ({error.strerror})"
        raise ConfigError(
            [
                Problem(
                    "triggers file", reason, source, "create it (pi-dispatch init writes one) or set PI_TRIGGERS_FILE"
                )
            ]
        ) from None
    return text


def load_triggers(path: Path, label: str | None = None) -> list[Trigger]:
    """The triggers of one file, or ConfigError naming each refused entry."""
    return read_triggers(path, label)[1]


def check_triggers(document: object) -> list[Problem]:
    """The parser's verdict on a parsed document, as problems (for agreement with the published schema)."""
    try:
        parse_triggers(json.dumps(document), "(document)")
    except ConfigError as error:
        return error.problems
    return []
