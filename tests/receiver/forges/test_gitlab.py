"""The GitLab gate, pure: receiver-contract §15.3 (user 7 is a member; the verdict is True unless said)."""

from __future__ import annotations

from typing import Any

from pi_dispatch.receiver.forges import gitlab as forge_gitlab
from pi_dispatch.receiver.routes import Drop
from pi_dispatch.receiver.rules import ForgeRules
from tests.receiver.forges.test_github import rule

SELF = 999
FLOWS = frozenset({"frontend-fix", "triage", "docs", "review", "wrapup", "sweep", "mr-wrap"})


def gl(index: int, on_type: str, run: dict[str, Any], **on: Any) -> Any:
    made = rule(index, on_type, run, **on)
    return type(made)(**{**made.__dict__, "run": {**made.run, "kind": "gitlab"}})


LABEL = gl(2, "label", {"flow": "frontend-fix"}, any=["pi:frontend"])
COMMENT = gl(4, "comment", {"flow": "triage"}, phrase="@pi")
MR_PLAIN = gl(6, "pull_request", {"flow": "review"}, actions=["open", "approved"])
MR_LABEL = gl(7, "pull_request", {"flow": "label-review"}, actions=["update"], any=["pi:review"])
RULES = ForgeRules(label=(LABEL,), comment=COMMENT, pull_request=(MR_PLAIN, MR_LABEL))
ISSUE_ONCE = gl(10, "issue", {"flow": "wrapup"}, actions=["close"], number=5, once=True)
ISSUE_ANY = gl(11, "issue", {"flow": "sweep"}, actions=["close"])
MR_CLOSE = gl(12, "pull_request", {"flow": "mr-wrap"}, actions=["close"])
CLOSING = ForgeRules(
    label=(LABEL,),
    comment=COMMENT,
    pull_request=(MR_PLAIN, MR_LABEL),
    issue=(ISSUE_ONCE, ISSUE_ANY),
    pr_close=(MR_CLOSE,),
)


def titles(*names: str) -> list[dict[str, str]]:
    return [{"title": name} for name in names]


def event(
    kind: str, action: str, user: object = 7, changes: dict[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    attributes = {"iid": 5, "title": "T", "description": "D", "action": action, "labels": extra.pop("labels", [])}
    attributes |= extra.pop("attributes", {})
    body = {
        "object_kind": kind,
        "user": {"id": user, "username": "alice"} if user is not None else {},
        "project": {"id": 42, "path_with_namespace": "group/sub/proj", "default_branch": "main"},
        "object_attributes": attributes,
        "changes": changes or {},
    }
    return body | extra


def label_change(previous: list[str], current: list[str]) -> dict[str, Any]:
    return {"labels": {"previous": titles(*previous), "current": titles(*current)}}


def gate(body: dict[str, Any], rules: ForgeRules = RULES, verdict: object = True) -> Any:
    return forge_gitlab.gate(
        forge_gitlab.project(body), rules, FLOWS, self_id=SELF, authorized=verdict, delivery="wh-1"
    )


def reason(found: object) -> str | None:
    return found.reason if isinstance(found, Drop) else None


def test_issue_labels_fire_on_what_the_event_added() -> None:
    added = gate(event("issue", "update", changes=label_change([], ["pi:frontend"])))
    assert added["flow"] == "frontend-fix"
    assert added["trigger"]["matched"] == {"index": 2, "type": "label", "label": "pi:frontend"}
    assert reason(gate(event("issue", "update", labels=titles("pi:frontend")))) == "no-label-change"
    assert reason(gate(event("issue", "update", changes=label_change(["pi:frontend"], [])))) == "no-label-change"
    assert gate(event("issue", "update", changes=label_change(["keep"], ["keep", "pi:frontend"])))["flow"]
    assert gate(event("issue", "open", labels=titles("pi:frontend")))["flow"] == "frontend-fix"
    assert reason(gate(event("issue", "update", changes=label_change([], ["other"])))) == "no-allowlisted-label"


def test_the_verdict_gates_everything() -> None:
    for body in (
        event("issue", "update", changes=label_change([], ["pi:frontend"])),
        event("merge_request", "open"),
        event("note", "create", attributes={"note": "@pi", "noteable_type": "Issue"}, issue={"iid": 5}),
    ):
        for verdict in (False, None, "true", 1, 30, {}):
            assert reason(gate(body, verdict=verdict)) == "author-not-allowed"
    own = event("note", "create", SELF, attributes={"note": "@pi", "noteable_type": "Issue"}, issue={"iid": 5})
    assert reason(gate(own)) == "self"
    assert reason(gate(event("issue", "open", user=None, labels=titles("pi:frontend")))) == "missing-sender-id"


def test_notes_and_merge_requests() -> None:
    note = event(
        "note",
        "create",
        attributes={"note": "@pi docs", "noteable_type": "MergeRequest"},
        merge_request={"iid": 12, "title": "MR", "description": "D"},
    )
    job = gate(note)
    assert job["target"] == {"type": "pull_request", "number": 12, "title": "MR", "body": "D"}
    assert job["flow"] == "docs" and job["trigger"]["comment"] == {"body": "@pi docs"}
    nonesuch = event("note", "create", attributes={"note": "@pi nonesuch", "noteable_type": "Issue"}, issue={"iid": 3})
    assert gate(nonesuch)["flow"] == "triage" and gate(nonesuch)["target"]["type"] == "issue"
    for action in ("open", "approved"):
        found = gate(event("merge_request", action))
        assert found["trigger"]["matched"] == {"index": 6, "type": "pull_request", "action": action}
    labelled = gate(event("merge_request", "update", changes=label_change([], ["pi:review"])))
    assert labelled["trigger"]["matched"] == {"index": 7, "type": "label", "label": "pi:review"}
    assert reason(gate(event("merge_request", "update", labels=titles("pi:review")))) == "no-matching-pr-trigger"
    assert reason(gate(event("push", "create"))) == "unhandled-event"
    assert reason(gate(event("merge_request", "merge"))) == "unhandled-event"
    assert reason(gate(event("note", "update", attributes={"note": "@pi"}))) == "unhandled-event"


def test_the_job_names_the_project_by_id_and_never_the_user() -> None:
    job = gate(event("issue", "open", labels=titles("pi:frontend")))
    assert list(job) == ["repo", "projectId", "target", "flow", "trigger"]
    assert job["repo"] == "group/sub/proj" and job["projectId"] == 42 and job["target"]["number"] == 5
    assert job["trigger"]["event"] == "issue" and job["trigger"]["action"] == "open"
    assert "alice" not in str(job)
    command = ForgeRules(comment=gl(4, "comment", {"command": "summarize"}, phrase="@pi"))
    note = event("note", "create", attributes={"note": "@pi docs", "noteable_type": "Issue"}, issue={"iid": 5})
    commanded = gate(note, command)
    assert list(commanded) == ["repo", "projectId", "target", "command", "trigger"]
    assert commanded["trigger"]["comment"] == {"body": "@pi docs"}


def test_close_rules() -> None:
    once = gate(event("issue", "close"), CLOSING)
    assert once["flow"] == "wrapup" and once["trigger"]["action"] == "close"
    assert once["trigger"]["matched"] == {"index": 10, "type": "issue", "action": "close", "number": 5, "once": True}
    other = gate(event("issue", "close", attributes={"iid": 9}), CLOSING)
    assert other["flow"] == "sweep" and other["trigger"]["matched"] == {
        "index": 11,
        "type": "issue",
        "action": "close",
        "number": 9,
    }
    mr = gate(event("merge_request", "close", attributes={"iid": 12, "title": "MR"}), CLOSING)
    assert mr["trigger"]["matched"] == {"index": 12, "type": "pull_request", "action": "close"}
    assert mr["target"] == {"type": "pull_request", "number": 12, "title": "MR", "body": "D"}
    narrowed = ForgeRules(issue=(gl(10, "issue", {"flow": "w"}, actions=["close"], number=8),))
    assert reason(gate(event("issue", "close"), narrowed)) == "close-number-not-matched"
    assert reason(gate(event("issue", "close"))) == "no-matching-close-trigger"
    assert reason(gate(event("merge_request", "close"))) == "no-matching-close-trigger"
    both = event("issue", "close", labels=titles("pi:frontend"), changes=label_change([], ["pi:frontend"]))
    label_job = gate(both)
    assert label_job == gate(event("issue", "update", changes=label_change([], ["pi:frontend"]))) | {
        "trigger": label_job["trigger"]
    }
    assert label_job["trigger"]["action"] == "close" and label_job["flow"] == "frontend-fix"
    assert gate(both, CLOSING)["flow"] == "wrapup"
    assert gate(both, ForgeRules(label=(LABEL,), issue=narrowed.issue))["flow"] == "frontend-fix"
    assert reason(gate(event("issue", "close"), CLOSING, verdict=False)) == "author-not-allowed"
    update = event("issue", "update", changes=label_change([], ["pi:frontend"]))
    assert gate(update, CLOSING) == gate(update)
