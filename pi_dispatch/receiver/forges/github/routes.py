"""GitHub: the payload fields a gate may see, the gate, and its spec (`SPEC`): checks, delivery id, authority lookup.

The payload's `author_association` (OWNER, MEMBER, COLLABORATOR) is only a first filter, as in the reference: MEMBER
is any member of the organisation and COLLABORATOR may be read-only. Every delivery that would start a job has its
sender's repository permission looked up first (write or admin; `wants_sender_authority` says when) and handed in
as `authority`; anything but exactly True refuses. A `labeled` event fires only a rule naming the label it added.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from pi_dispatch.core.jscompat import MISSING, get, is_integer, is_number, js_trim, truthy
from pi_dispatch.receiver.forges.spec import Delivery
from pi_dispatch.receiver.routes import (
    Drop,
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

ALLOWED_ASSOCIATIONS: Final = ("OWNER", "MEMBER", "COLLABORATOR")
CLOSE_WORD: Final = "closed"
REVIEW_ACTION: Final = "review_submitted"
LABEL_ACTIONS: Final = ("opened", "labeled", "reopened")
PR_ACTIONS: Final = ("labeled", "opened", "synchronize", "reopened")
AUTHOR_GATED: Final = ("opened", "synchronize", "reopened")
# The objects each event's payload never holds (GitHub's webhook reference): a body under another event's name.
FOREIGN: Final = {
    "issues": frozenset({"comment", "pull_request", "review"}),
    "issue_comment": frozenset({"pull_request", "review"}),
    "pull_request": frozenset({"comment", "review", "issue"}),
    "pull_request_review": frozenset({"comment", "issue"}),
}
FOREIGN_OBJECTS: Final = ("issue", "comment", "pull_request", "review")
_SENDER_REFUSED: Final = {REVIEW_ACTION: "review-author-not-allowed", "labeled": "sender-not-allowed"}


def project(payload: object) -> dict[str, Any]:
    """The only fields the gate and the job may see. Raises TypeError on JSON null, as the reference answers 400."""
    refuse_null(payload)
    issue, pr, review = get(payload, "issue"), get(payload, "pull_request"), get(payload, "review")
    state = get(review, "state")
    comment = get(payload, "comment")
    projected: dict[str, Any] = {
        "action": get(payload, "action"),
        "sender": {"id": get(get(payload, "sender"), "id"), "login": get(get(payload, "sender"), "login")},
        # a comment on a pull request carries issue.pull_request: only whether it is there is kept
        "issue": issue_fields(issue) | {"pull_request": get(issue, "pull_request") not in (None, MISSING)},
        "label": {"name": get(get(payload, "label"), "name")},  # the label a `labeled` event added
        "comment": {"body": get(comment, "body"), "author_association": get(comment, "author_association")},
        "repository": {"full_name": get(get(payload, "repository"), "full_name")},
        "carries": carried(payload, *FOREIGN_OBJECTS),
    }
    if truthy(pr):
        projected["pull_request"] = pull_request_fields(pr, "author_association")
    if truthy(review):
        projected["review"] = {
            "id": get(review, "id"),
            "body": get(review, "body"),
            "state": state.lower() if isinstance(state, str) else state,  # the REST API says APPROVED
            "author_association": get(review, "author_association"),
        }
    return projected


def _allowed(association: object) -> bool:
    return isinstance(association, str) and association in ALLOWED_ASSOCIATIONS


def _issue_target(issue: Mapping[str, Any], target_type: str = "issue") -> dict[str, Any]:
    return {"type": target_type, "number": issue["number"], "title": issue["title"], "body": issue["body"]}


def _pr_target(pr: Mapping[str, Any]) -> dict[str, Any]:
    head = pr["head"]
    return {
        "type": "pull_request",
        "number": pr["number"],
        "title": pr["title"],
        "body": pr["body"],
        "head": {"ref": head["ref"], "sha": head["sha"], "repo": head["repo"]["full_name"]},
        "base": {"ref": pr["base"]["ref"]},
    }


def _close_lookup(event: object, p: Mapping[str, Any], rules: ForgeRules) -> Rule | Drop | None:
    """The close rule a close delivery matches (or why none does); None when it is not a close delivery."""
    if p["action"] != CLOSE_WORD:
        return None
    if event == "issues":
        number = p["issue"]["number"]
        return close_rule(rules.issue, CLOSE_WORD, number) if is_integer(number) else Drop("missing-issue-number")
    if event == "pull_request":
        pr = p.get("pull_request")
        if pr is None or not is_integer(pr["number"]):
            return Drop("missing-pull-request")
        return close_rule(rules.pr_close, CLOSE_WORD, pr["number"])
    return None


def wants_sender_authority(
    event: object, p: Mapping[str, Any], rules: ForgeRules | None, known_flows: frozenset[str], self_id: object
) -> bool:
    """Whether this delivery would start a job were its sender allowed: only then is the forge asked (a delivery
    that matches no rule, or the harness's own, costs no lookup)."""
    if rules is None:
        return False
    verdict = gate(event, p, rules, known_flows, self_id=self_id, delivery=None, authority=True)
    return not isinstance(verdict, Drop)


def _label_route(
    event: object, action: object, p: Mapping[str, Any], rules: ForgeRules, *, delivery: object, authority: object
) -> Verdict:
    """An issue label rule: on `labeled`, the first rule naming the label added whose predicate the issue's labels
    meet; on `opened`/`reopened`, the first whose predicate they meet. Either only from a sender with write."""
    labels = label_names(p["issue"]["labels"])
    added = p["label"]["name"] if action == "labeled" else None
    eligible = rules.label if added is None else tuple(rule for rule in rules.label if names_label(rule, added))
    rule = first_label_rule(eligible, labels)
    if rule is None:
        return Drop("no-allowlisted-label")
    if authority is not True:
        return Drop("sender-not-allowed")
    trigger = trigger_object(event, action, delivery, p["sender"]["id"], label_matched(rule, labels))
    return job_literal(p["repository"]["full_name"], _issue_target(p["issue"]), rule.execution(), trigger)


def _comment_route(
    p: Mapping[str, Any], rules: ForgeRules, known_flows: frozenset[str], *, delivery: object, authority: object
) -> Verdict:
    """A comment's rule: its author's association first (no lookup for an outsider), then the phrase and the flow
    it names, then the author's write access."""
    comment = p["comment"]
    if not _allowed(comment["author_association"]):
        return Drop("author-not-allowed")
    if rules.comment is None:
        return Drop("no-trigger-phrase")
    execution = comment_execution(rules.comment, comment["body"], known_flows)
    if isinstance(execution, Drop):
        return execution
    if authority is not True:
        return Drop("author-not-allowed")
    target_type = "pull_request" if p["issue"]["pull_request"] else "issue"
    matched = comment_matched(rules.comment)
    trigger = trigger_object("issue_comment", p["action"], delivery, p["sender"]["id"], matched, comment=comment)
    return job_literal(p["repository"]["full_name"], _issue_target(p["issue"], target_type), execution, trigger)


def _review_drop(review: Mapping[str, Any] | None) -> Drop | None:
    if review is None or not _allowed(review["author_association"]):
        return Drop("review-author-not-allowed")
    body = review["body"]
    if review["state"] == "commented" and not (isinstance(body, str) and js_trim(body)):
        return Drop("no-review-body")
    return None


def names_label(rule: Rule, added: object) -> bool:
    """Whether a `labeled` event's added label is one the rule fires on: a rule naming labels fires when one of
    them is applied, never when another label is applied beside it (a triager's unrelated label)."""
    return not rule.positive or (isinstance(added, str) and (added in rule.any or added in rule.all))


def _pr_rule(
    rules: ForgeRules,
    action: str,
    author: object,
    labels: list[str],
    review: Mapping[str, Any] | None,
    *,
    added: object,
) -> tuple[Rule | None, bool]:
    """The first PR rule that fires, and whether one was passed over only for the review's state."""
    state_missed = False
    for rule in rules.pull_request:
        if action not in rule.actions:
            continue
        # applying a label is the approval, so `labeled` asks the predicate and the label applied; every other
        # action the author too
        if not rule.matches(labels):
            continue
        if (not names_label(rule, added)) if action == "labeled" else not _allowed(author):
            continue
        if action == REVIEW_ACTION and rule.review_states is not None and review is not None:
            state = review["state"]
            if not (isinstance(state, str) and state in rule.review_states):
                state_missed = True
                continue
        return rule, state_missed
    return None, state_missed


def _pull_request_route(
    event: object, action: str, p: Mapping[str, Any], rules: ForgeRules, *, delivery: object, authority: object
) -> Verdict:
    pr, review = p.get("pull_request"), p.get("review")
    if pr is None:
        return Drop("missing-pull-request")
    if action == REVIEW_ACTION:
        dropped = _review_drop(review)
        if dropped is not None:
            return dropped
    author = (
        review["author_association"] if action == REVIEW_ACTION and review is not None else pr["author_association"]
    )
    rule, state_missed = _pr_rule(rules, action, author, label_names(pr["labels"]), review, added=p["label"]["name"])
    if rule is not None:
        if authority is not True:  # the sender (labeler, reviewer, pusher) has no write access
            return Drop(_SENDER_REFUSED.get(action, "pr-author-not-allowed"))
        matched = {"index": rule.index, "type": "pull_request", "action": action}
        extra = {"review": review} if action == REVIEW_ACTION else {}
        trigger = trigger_object(event, p["action"], delivery, p["sender"]["id"], matched, **extra)
        return job_literal(p["repository"]["full_name"], _pr_target(pr), rule.execution(), trigger)
    if state_missed:
        return Drop("review-state-not-matched")
    if action in AUTHOR_GATED and not _allowed(author):
        return Drop("pr-author-not-allowed")
    return Drop("no-matching-pr-trigger")


def _close_route(
    event: object, p: Mapping[str, Any], rules: ForgeRules, delivery: object, authority: object
) -> Verdict:
    found = _close_lookup(event, p, rules)
    if not isinstance(found, Rule):
        return found if isinstance(found, Drop) else Drop("unhandled-event")
    if authority is not True:
        return Drop("closer-not-allowed")
    sender, repo = p["sender"]["id"], p["repository"]["full_name"]
    if event == "issues":
        number = p["issue"]["number"]
        matched = close_matched(found, "issue", CLOSE_WORD, number)
        trigger = trigger_object(event, p["action"], delivery, sender, matched)
        return job_literal(repo, _issue_target(p["issue"]), found.execution(), trigger)
    trigger = trigger_object(event, p["action"], delivery, sender, close_matched(found, "pull_request", CLOSE_WORD))
    return job_literal(repo, _pr_target(p["pull_request"]), found.execution(), trigger)


def gate(
    event: object,
    p: Mapping[str, Any],
    rules: ForgeRules,
    known_flows: frozenset[str],
    *,
    self_id: object,
    delivery: object,
    authority: object = MISSING,
) -> Verdict:
    """A GitHub delivery's job, or why it is dropped. `authority` is the sender's resolved permission verdict."""
    sender = p["sender"]["id"]
    if not is_number(sender):
        return Drop("missing-sender-id")
    if sender == self_id:
        return Drop("self")
    if (mismatch := shape_refused(event, p["carries"], FOREIGN)) is not None:
        return mismatch
    action = p["action"]
    if event == "issues" and action in LABEL_ACTIONS:
        return _label_route(event, action, p, rules, delivery=delivery, authority=authority)
    if event == "issue_comment" and action == "created":
        return _comment_route(p, rules, known_flows, delivery=delivery, authority=authority)
    if event == "pull_request" and action in PR_ACTIONS:
        return _pull_request_route(event, str(action), p, rules, delivery=delivery, authority=authority)
    if event == "pull_request_review" and action == "submitted":
        return _pull_request_route(event, REVIEW_ACTION, p, rules, delivery=delivery, authority=authority)
    if event in ("issues", "pull_request") and action == CLOSE_WORD:
        return _close_route(event, p, rules, delivery, authority)
    return Drop("unhandled-event")


def _gate(d: Delivery, rules: ForgeRules, flows: frozenset[str], self_id: object, authority: object) -> Verdict:
    return gate(d.event, d.payload, rules, flows, self_id=self_id, delivery=d.id, authority=authority)
