"""What every forge's gate shares: drops, the routes (label, comment, close) and the job literal. Pure.

A gate sees only the projected payload, the rules, the harness's own identity, the resolved authority verdict
and the delivery id; it answers a job (a dict in the reference's key order) or a `Drop` with its reason. The
verdict must be exactly `True`: anything else refuses.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from pi_dispatch.core.jscompat import JS_SPACE, MISSING, get
from pi_dispatch.receiver.rules import Rule

DROP_REASONS: Final = (
    "missing-sender-id",
    "self",
    "author-not-allowed",
    "unhandled-event",
    "action-not-actionable",
    "no-allowlisted-label",
    "no-label-change",
    "no-trigger-phrase",
    "no-flow",
    "missing-pull-request",
    "missing-issue-number",
    "review-author-not-allowed",
    "no-review-body",
    "review-state-not-matched",
    "pr-author-not-allowed",
    "no-matching-pr-trigger",
    "close-number-not-matched",
    "no-matching-close-trigger",
    "closer-not-allowed",
    "no-repository",
    "sender-not-allowed",
    "flow-not-allowed",
    "event-shape-mismatch",
)
# The execution fields that hand a job credentials: a comment rule binding one runs only its own flow.
SECRET_FIELDS: Final = ("secrets", "secretsProfile")
_WORD: Final = f"[{re.escape(JS_SPACE)}]+([^{re.escape(JS_SPACE)}]+)"


@dataclass(frozen=True)
class Drop:
    """A correct refusal: the delivery is answered 204 and logged with its reason."""

    reason: str

    def __post_init__(self) -> None:
        assert self.reason in DROP_REASONS, self.reason


Job = dict[str, Any]
Verdict = Job | Drop


def refuse_null(payload: object) -> None:
    """JSON null answers 400, as in the reference, where reading a field of it throws; any other value projects."""
    if payload is None:
        raise TypeError("a delivery body must not be null")


def carried(payload: object, *names: str) -> list[str]:
    """Which of these top-level objects the payload holds: what its (unsigned) event name must agree with."""
    return [name for name in names if isinstance(get(payload, name), dict)]


def shape_refused(event: object, carries: Sequence[str], foreign: Mapping[str, frozenset[str]]) -> Drop | None:
    """A body sent under an event name whose payloads never hold one of its objects (a signed `pull_request`
    body replayed as `issues`): the signature covers the body, not the name, so the name is checked against it."""
    found = foreign.get(event) if isinstance(event, str) else None
    return Drop("event-shape-mismatch") if found is not None and found.intersection(carries) else None


def named(value: object, key: str = "name") -> list[dict[str, object]]:
    """A label list as `[{name}]` (GitLab names a label by `title`); not a list reads as no labels."""
    return [{"name": get(item, key)} for item in value] if isinstance(value, list) else []


def issue_fields(issue: object) -> dict[str, Any]:
    return {
        "number": get(issue, "number"),
        "title": get(issue, "title"),
        "body": get(issue, "body"),
        "labels": named(get(issue, "labels")),
    }


def pull_request_fields(pr: object, *extra: str) -> dict[str, Any]:
    """A pull request's number, text, labels, head and base, with `extra` fields (GitHub's association)."""
    head = get(pr, "head")
    return {
        "number": get(pr, "number"),
        "title": get(pr, "title"),
        "body": get(pr, "body"),
        **{key: get(pr, key) for key in extra},
        "labels": named(get(pr, "labels")),
        "head": {
            "ref": get(head, "ref"),
            "sha": get(head, "sha"),
            "repo": {"full_name": get(get(head, "repo"), "full_name")},
        },
        "base": {"ref": get(get(pr, "base"), "ref")},
    }


def first_label_rule(rules: Sequence[Rule], labels: Sequence[str]) -> Rule | None:
    return next((rule for rule in rules if rule.matches(labels)), None)


def label_matched(rule: Rule, labels: Sequence[str]) -> dict[str, Any]:
    return {"index": rule.index, "type": "label", "label": rule.matched_label(labels)}


def comment_execution(rule: Rule, body: object, known_flows: frozenset[str]) -> dict[str, Any] | Drop:
    """A comment rule's flow (or command) for this comment body, or the drop reason."""
    phrase = rule.phrase or ""
    if not isinstance(body, str) or phrase not in body:
        return Drop("no-trigger-phrase")
    execution = rule.execution()
    if "command" in execution:
        return execution  # the phrase alone fires a command; trailing words change nothing
    word = re.search(re.escape(phrase) + _WORD, body)
    if word is not None and word.group(1) in known_flows and word.group(1) != execution.get("flow"):
        if any(key in execution for key in SECRET_FIELDS):
            # the rule's secrets were granted to its own flow: a comment may not carry them into another one
            return Drop("flow-not-allowed")
        execution["flow"] = word.group(1)
    if not isinstance(execution.get("flow"), str) or not execution["flow"]:
        return Drop("no-flow")
    return execution


def comment_matched(rule: Rule) -> dict[str, Any]:
    return {"index": rule.index, "type": "comment", "phrase": rule.phrase}


def close_rule(rules: Sequence[Rule], close_word: str, number: object) -> Rule | Drop:
    """The first rule holding the close word whose number is absent or this item's."""
    narrowed_away = False
    for rule in rules:
        if close_word not in rule.actions:
            continue
        if rule.number is None or rule.number == number:
            return rule
        narrowed_away = True
    return Drop("close-number-not-matched" if narrowed_away else "no-matching-close-trigger")


def close_matched(rule: Rule, on_type: str, close_word: str, number: object = MISSING) -> dict[str, Any]:
    matched: dict[str, Any] = {"index": rule.index, "type": on_type, "action": close_word}
    if number is not MISSING:
        matched["number"] = number
    if rule.once:
        matched["once"] = True
    return matched


def trigger_object(
    event: object,
    action: object,
    delivery: object,
    sender_id: object,
    matched: Mapping[str, Any],
    *,
    comment: Mapping[str, Any] | None = None,
    review: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The `trigger` a job carries into /job/event.json: facts about the delivery, never an execution field."""
    trigger: dict[str, Any] = {
        "event": event,
        "action": action,
        "deliveryId": delivery,
        "sender": {"id": sender_id},
        "matched": dict(matched),
    }
    if comment is not None:
        trigger["comment"] = dict(comment)
    if review is not None:
        trigger["review"] = dict(review)
    return trigger


def job_literal(
    repo: object,
    target: Mapping[str, Any],
    execution: Mapping[str, Any],
    trigger: Mapping[str, Any],
    scope: Mapping[str, Any] | None = None,
) -> Job:
    """repo, the forge's scope (projectId or azure), target, flow or command, the rule's fields, trigger."""
    job: Job = {"repo": repo, **(scope or {}), "target": dict(target)}
    job.update(execution)
    job["trigger"] = dict(trigger)
    cleaned: Job = _without_missing(job)
    return cleaned


_SAFE_INTEGER: Final = 2**53


def _without_missing(value: Any) -> Any:
    """Drop keys whose value is absent (JavaScript's undefined), as JSON.stringify does, and write an integral
    number as the integer JavaScript prints (a payload's 5.0 is stored as 5, not 5.0)."""
    kind = type(value)
    if kind is str or kind is int or value is None:
        return value
    if kind is dict:
        return {key: _without_missing(item) for key, item in value.items() if item is not MISSING}
    if kind is list:
        return [None if item is MISSING else _without_missing(item) for item in value]
    if kind is float and value.is_integer() and abs(value) < _SAFE_INTEGER:
        return int(value)
    return value
