"""GitLab: the payload fields a gate may see, the gate, and its spec (`SPEC`): checks, delivery id, authority.

GitLab carries no author association, and a Guest can open an issue already labelled, so every delivery needs
the actor's project access resolved first (Developer or above); the verdict is handed in. Labels fire on the
labels an event added (`changes.labels`, or every label of a new issue), never on labels an issue still has.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from aiohttp import web

from pi_dispatch.core.jscompat import MISSING, get, is_integer, is_number, truthy
from pi_dispatch.receiver.forges.gitlab.access import GitLabVerifier
from pi_dispatch.receiver.forges.spec import (
    Answered,
    Delivery,
    as_text,
    parsed,
    read_body,
    require_json_post,
)
from pi_dispatch.receiver.routes import (
    Drop,
    Verdict,
    close_matched,
    close_rule,
    comment_execution,
    comment_matched,
    first_label_rule,
    job_literal,
    named,
    refuse_null,
    trigger_object,
)
from pi_dispatch.receiver.rules import ForgeRules, Rule, label_names

CLOSE_WORD: Final = "close"
MR_ACTIONS: Final = ("open", "update", "reopen", "approved")


def project(payload: object) -> dict[str, Any]:
    """The only fields the gate and the job may see. Raises TypeError on JSON null."""
    refuse_null(payload)
    attributes, user, project_ = get(payload, "object_attributes"), get(payload, "user"), get(payload, "project")
    kind = get(payload, "object_kind")
    source = attributes
    if kind == "note":
        is_mr = get(attributes, "noteable_type") == "MergeRequest"
        source = get(payload, "merge_request") if is_mr else get(payload, "issue")
    labels = get(payload, "labels")
    projected: dict[str, Any] = {
        "objectKind": kind,
        "action": get(attributes, "action"),
        "user": {"id": get(user, "id"), "username": get(user, "username")},
        "project": {
            "id": get(project_, "id"),
            "path": get(project_, "path_with_namespace"),
            "defaultBranch": get(project_, "default_branch"),
        },
        "target": {
            "iid": get(source, "iid"),
            "title": get(source, "title"),
            "description": get(source, "description"),
            "labels": named(get(source, "labels") if isinstance(get(source, "labels"), list) else labels, "title"),
        },
        "note": get(attributes, "note"),
        "noteableType": get(attributes, "noteable_type"),
        "labels": named(labels, "title"),
    }
    changed = get(get(payload, "changes"), "labels")
    if truthy(changed):
        projected["labelChanges"] = {
            "previous": named(get(changed, "previous"), "title"),
            "current": named(get(changed, "current"), "title"),
        }
    return projected


def _added_labels(p: Mapping[str, Any]) -> list[str] | None:
    """The labels this event added: every label of a new issue, else current minus previous; None for none."""
    if p["action"] == "open":
        current = label_names(p["target"]["labels"])
        return current or None
    changes = p.get("labelChanges")
    if changes is None:
        return None
    previous = set(label_names(changes["previous"]))
    added = [name for name in dict.fromkeys(label_names(changes["current"])) if name not in previous]
    return added or None


def _target(p: Mapping[str, Any], target_type: str) -> dict[str, Any]:
    target = p["target"]
    return {"type": target_type, "number": target["iid"], "title": target["title"], "body": target["description"]}


class _Gate:
    def __init__(self, p: Mapping[str, Any], rules: ForgeRules, known_flows: frozenset[str], delivery: object) -> None:
        self.p, self.rules, self.known_flows, self.delivery = p, rules, known_flows, delivery

    def job(
        self,
        rule: Rule,
        matched: Mapping[str, Any],
        target_type: str,
        execution: Mapping[str, Any] | None = None,
        comment: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        p = self.p
        trigger = trigger_object(p["objectKind"], p["action"], self.delivery, p["user"]["id"], matched, comment=comment)
        scope = {"projectId": p["project"]["id"]}
        chosen = execution if execution is not None else rule.execution()
        return job_literal(p["project"]["path"], _target(p, target_type), chosen, trigger, scope)

    def label(self, target_type: str) -> Verdict:
        added = _added_labels(self.p)
        if added is None:
            return Drop("no-label-change")
        rule = first_label_rule(self.rules.label, added)
        if rule is None:
            return Drop("no-allowlisted-label")
        return self.job(rule, {"index": rule.index, "type": "label", "label": rule.matched_label(added)}, target_type)

    def close(self, rules: tuple[Rule, ...], on_type: str, authorized: object) -> Verdict:
        number = self.p["target"]["iid"]
        if not is_integer(number):
            return Drop("missing-issue-number" if on_type == "issue" else "missing-pull-request")
        found = close_rule(rules, CLOSE_WORD, number)
        if isinstance(found, Drop):
            return found
        if authorized is not True:
            return Drop("closer-not-allowed")
        number_field = number if on_type == "issue" else MISSING
        target_type = "issue" if on_type == "issue" else "pull_request"
        return self.job(found, close_matched(found, on_type, CLOSE_WORD, number_field), target_type)

    def merge_request(self) -> Verdict:
        action = self.p["action"]
        if action not in MR_ACTIONS:
            return Drop("unhandled-event")
        added = _added_labels(self.p)
        for rule in self.rules.pull_request:
            if action not in rule.actions:
                continue
            if rule.positive:
                if added is None or not rule.matches(added):
                    continue
                matched = {"index": rule.index, "type": "label", "label": rule.matched_label(added)}
                return self.job(rule, matched, "pull_request")
            return self.job(rule, {"index": rule.index, "type": "pull_request", "action": action}, "pull_request")
        return Drop("no-matching-pr-trigger")

    def note(self) -> Verdict:
        rule = self.rules.comment
        if self.p["action"] != "create":
            return Drop("unhandled-event")
        if rule is None:
            return Drop("no-trigger-phrase")
        body = self.p["note"]
        execution = comment_execution(rule, body, self.known_flows)
        if isinstance(execution, Drop):
            return execution
        target_type = "pull_request" if self.p["noteableType"] == "MergeRequest" else "issue"
        return self.job(rule, comment_matched(rule), target_type, execution, {"body": body})


def gate(
    p: Mapping[str, Any],
    rules: ForgeRules,
    known_flows: frozenset[str],
    *,
    self_id: object,
    authorized: object,
    delivery: object,
) -> Verdict:
    """A GitLab delivery's job, or why it is dropped. `authorized` is the actor's resolved access verdict."""
    sender = p["user"]["id"]
    if not is_number(sender):
        return Drop("missing-sender-id")
    if sender == self_id:
        return Drop("self")
    if authorized is not True:
        return Drop("author-not-allowed")
    routes = _Gate(p, rules, known_flows, delivery)
    kind, action = p["objectKind"], p["action"]
    if kind == "issue":
        if action != CLOSE_WORD:
            return routes.label("issue")
        verdict = routes.close(rules.issue, "issue", authorized)
        # A close that also moved labels falls back to the label rules unless a close rule took it.
        if isinstance(verdict, Drop) and verdict.reason != "closer-not-allowed" and "labelChanges" in p:
            return routes.label("issue")
        return verdict
    if kind == "merge_request":
        return (
            routes.close(rules.pr_close, "pull_request", authorized) if action == CLOSE_WORD else routes.merge_request()
        )
    if kind == "note":
        return routes.note()
    return Drop("unhandled-event")


def _delivery_id(headers: Mapping[str, str]) -> str | None:
    return headers.get("webhook-id") or headers.get("Idempotency-Key") or None


async def _verify(request: web.BaseRequest, verifier: GitLabVerifier, now_s: float) -> Delivery:
    require_json_post(request, "method not allowed", "unsupported media type")
    if "X-Gitlab-Event" not in request.headers:
        raise Answered(400, {"error": "missing gitlab event header"})
    delivery = _delivery_id(request.headers)
    if not delivery:
        detail = "send a webhook-id or Idempotency-Key header: GitLab 17.4 or later sends one"
        raise Answered(400, {"error": "missing delivery id", "detail": detail})
    body = as_text(await read_body(request, {"error": "payload too large"}))
    refusal = verifier.refusal(request.headers, body, now_s)
    if refusal is not None:
        raise Answered(401, {"error": refusal})
    return Delivery(parsed(body, project, {"error": "invalid-json"}), "", delivery)


def _gate(d: Delivery, rules: ForgeRules, flows: frozenset[str], self_id: object, verdict: object) -> Verdict:
    return gate(d.payload, rules, flows, self_id=self_id, authorized=verdict, delivery=d.id)
