"""Forgejo: the payload fields a gate may see, its own action words, the gate, and its spec (`SPEC`).

Forgejo signs like GitHub and sends GitHub's header names, but has no author association: every delivery needs
the actor's repository permission resolved first (write or admin), handed in as the verdict. Rules name
Forgejo's raw words (`label_updated`, `synchronized`); routes read them mapped onto GitHub's vocabulary.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from pi_dispatch.core.jscompat import get, is_integer, is_number, truthy
from pi_dispatch.receiver.forges.spec import Delivery
from pi_dispatch.receiver.routes import (
    Drop,
    Job,
    Verdict,
    carried,
    close_matched,
    close_rule,
    comment_execution,
    comment_matched,
    first_label_rule,
    issue_fields,
    job_literal,
    label_matched,
    pull_request_fields,
    refuse_null,
    shape_refused,
    trigger_object,
)
from pi_dispatch.receiver.rules import ForgeRules, Rule, label_names

CLOSE_WORD: Final = "closed"
_ISSUE_WORDS: Final = {"opened": "opened", "reopened": "reopened", "closed": "closed", "label_updated": "labeled"}
ACTION_MAP: Final[Mapping[str, Mapping[str, str]]] = {
    "issues": _ISSUE_WORDS,
    "pull_request": {**_ISSUE_WORDS, "synchronized": "synchronize"},
}
# Words Forgejo sends that name nothing to act on: refused as such rather than as an unknown event.
NOT_ACTIONABLE: Final = frozenset(
    {
        "label_cleared",
        "edited",
        "assigned",
        "unassigned",
        "milestoned",
        "demilestoned",
        "reviewed",
        "review_requested",
        "review_request_removed",
    }
)


# The objects each event's payload never holds: a signed body sent again under another event's name.
FOREIGN: Final = {
    "issues": frozenset({"comment", "pull_request"}),
    "issue_comment": frozenset({"pull_request"}),
    "pull_request": frozenset({"comment"}),
}


def map_action(event: object, action: object) -> str | None:
    """Forgejo's word as the routes read it, or None when the event has no such action."""
    words = ACTION_MAP.get(event) if isinstance(event, str) else None
    return words.get(action) if words is not None and isinstance(action, str) else None


def project(payload: object) -> dict[str, Any]:
    """The only fields the gate and the job may see. Raises TypeError on JSON null."""
    refuse_null(payload)
    pr, sender = get(payload, "pull_request"), get(payload, "sender")
    projected: dict[str, Any] = {
        "action": get(payload, "action"),
        "sender": {"id": get(sender, "id"), "login": get(sender, "login")},
        "issue": issue_fields(get(payload, "issue")),
        "comment": {"body": get(get(payload, "comment"), "body")},
        "isPull": get(payload, "is_pull") is True,
        "repository": {"full_name": get(get(payload, "repository"), "full_name")},
        "carries": carried(payload, "comment", "pull_request"),
    }
    if truthy(pr):
        projected["pull_request"] = pull_request_fields(pr)
    return projected


def _issue_target(issue: Mapping[str, Any], target_type: str = "issue") -> dict[str, Any]:
    return {"type": target_type, "number": issue["number"], "title": issue["title"], "body": issue["body"]}


def _pr_target(pr: Mapping[str, Any]) -> dict[str, Any]:
    """Forgejo keeps the head as projected (`repo: {full_name}`); GitHub flattens it."""
    return {
        "type": "pull_request",
        "number": pr["number"],
        "title": pr["title"],
        "body": pr["body"],
        "head": pr["head"],
        "base": pr["base"],
    }


def _unmapped(action: object) -> Drop:
    return Drop("action-not-actionable" if isinstance(action, str) and action in NOT_ACTIONABLE else "unhandled-event")


@dataclass(frozen=True)
class _Routes:
    """One delivery's routes: each answers a job or the drop."""

    event: object
    p: Mapping[str, Any]
    rules: ForgeRules
    known_flows: frozenset[str]
    delivery: object

    def job(
        self, target: Mapping[str, Any], rule: Rule, matched: Any, execution: Any = None, comment: Any = None
    ) -> Job:
        trigger = trigger_object(
            self.event, self.p["action"], self.delivery, self.p["sender"]["id"], matched, comment=comment
        )
        return job_literal(self.p["repository"]["full_name"], target, execution or rule.execution(), trigger)

    def comment(self) -> Verdict:
        rule, action = self.rules.comment, self.p["action"]
        if action != "created":
            return _unmapped(action)
        if rule is None:
            return Drop("no-trigger-phrase")
        body = self.p["comment"]["body"]
        execution = comment_execution(rule, body, self.known_flows)
        if isinstance(execution, Drop):
            return execution
        target = _issue_target(self.p["issue"], "pull_request" if self.p["isPull"] else "issue")
        return self.job(target, rule, comment_matched(rule), execution, {"body": body})

    def label(self) -> Verdict:
        labels = label_names(self.p["issue"]["labels"])
        rule = first_label_rule(self.rules.label, labels)
        if rule is None:
            return Drop("no-allowlisted-label")
        return self.job(_issue_target(self.p["issue"]), rule, label_matched(rule, labels))

    def issue_close(self) -> Verdict:
        number = self.p["issue"]["number"]
        if not is_integer(number):
            return Drop("missing-issue-number")
        found = close_rule(self.rules.issue, CLOSE_WORD, number)
        if isinstance(found, Drop):
            return found
        return self.job(_issue_target(self.p["issue"]), found, close_matched(found, "issue", CLOSE_WORD, number))

    def pull_request(self) -> Verdict:
        pr, raw = self.p.get("pull_request"), self.p["action"]
        if pr is None:
            return Drop("missing-pull-request")
        if raw == CLOSE_WORD:
            if not is_integer(pr["number"]):
                return Drop("missing-pull-request")
            found = close_rule(self.rules.pr_close, CLOSE_WORD, pr["number"])
            if isinstance(found, Drop):
                return found
            return self.job(_pr_target(pr), found, close_matched(found, "pull_request", CLOSE_WORD))
        labels = label_names(pr["labels"])
        for rule in self.rules.pull_request:
            if raw in rule.actions and rule.matches(labels):
                return self.job(_pr_target(pr), rule, {"index": rule.index, "type": "pull_request", "action": raw})
        return Drop("no-matching-pr-trigger")


def gate(
    event: object,
    p: Mapping[str, Any],
    rules: ForgeRules,
    known_flows: frozenset[str],
    *,
    self_id: object,
    authorized: object,
    delivery: object,
) -> Verdict:
    """A Forgejo delivery's job, or why it is dropped. `authorized` is the actor's resolved permission verdict."""
    sender, action = p["sender"]["id"], p["action"]
    if not is_number(sender):
        return Drop("missing-sender-id")
    if sender == self_id:
        return Drop("self")
    if (mismatch := shape_refused(event, p["carries"], FOREIGN)) is not None:
        return mismatch
    if authorized is not True:
        return Drop("author-not-allowed")
    routes = _Routes(event, p, rules, known_flows, delivery)
    if event == "issue_comment":
        return routes.comment()
    mapped = map_action(event, action)
    if mapped is None:
        return _unmapped(action) if event in ACTION_MAP else Drop("unhandled-event")
    if event == "issues" and mapped in ("opened", "labeled", "reopened"):
        return routes.label()
    if event == "issues" and mapped == CLOSE_WORD:
        return routes.issue_close()
    return routes.pull_request() if event == "pull_request" else Drop("unhandled-event")


def _gate(d: Delivery, rules: ForgeRules, flows: frozenset[str], self_id: object, verdict: object) -> Verdict:
    return gate(d.event, d.payload, rules, flows, self_id=self_id, authorized=verdict, delivery=d.id)
