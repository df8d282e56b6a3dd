"""The Forgejo gate, pure: receiver-contract §15.4."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from pi_dispatch.receiver.forges import forgejo as forge_forgejo
from pi_dispatch.receiver.routes import Drop
from pi_dispatch.receiver.rules import ForgeRules, Rule
from tests.receiver.forges.test_github import rule

SELF = 999
FLOWS = frozenset({"fix", "triage", "docs", "review"})


def fj(index: int, on_type: str, run: dict[str, Any], **on: Any) -> Rule:
    made = rule(index, on_type, run, **on)
    return dataclasses.replace(made, run={**made.run, "kind": "forgejo"})


LABEL = fj(0, "label", {"flow": "fix"}, any=["pi:go"])
COMMENT = fj(1, "comment", {"flow": "triage"}, phrase="@pi")
PR_LABEL = fj(2, "pull_request", {"flow": "review"}, actions=["label_updated"], any=["pi:review"])
PR_SYNC = fj(3, "pull_request", {"flow": "review"}, actions=["synchronized", "opened"])
ISSUE_ONCE = fj(4, "issue", {"flow": "wrap"}, actions=["closed"], number=7, once=True)
ISSUE_ANY = fj(5, "issue", {"flow": "sweep"}, actions=["closed"])
PR_CLOSE = fj(6, "pull_request", {"flow": "pr-wrap"}, actions=["closed"])
RULES = ForgeRules(label=(LABEL,), comment=COMMENT, pull_request=(PR_LABEL, PR_SYNC))
CLOSING = dataclasses.replace(RULES, issue=(ISSUE_ONCE, ISSUE_ANY), pr_close=(PR_CLOSE,))


def delivery(action: str, sender: object = 7, **parts: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"action": action, "repository": {"full_name": "acme/widgets"}}
    if sender is not None:
        body["sender"] = {"id": sender, "login": "alice"}
    return body | parts


def issue(labels: list[str] | None = None, number: object = 7) -> dict[str, Any]:
    return {"number": number, "title": "T", "body": "B", "labels": [{"name": n} for n in labels or []]}


def pr(labels: list[str] | None = None, number: object = 12) -> dict[str, Any]:
    return {
        "number": number,
        "title": "PR",
        "body": "D",
        "labels": [{"name": n} for n in labels or []],
        "head": {"ref": "feat", "sha": "abc123", "repo": {"full_name": "fork/widgets"}},
        "base": {"ref": "main"},
    }


def gate(event: str, body: dict[str, Any], rules: ForgeRules = RULES, verdict: object = True) -> Any:
    projected = forge_forgejo.project(body)
    return forge_forgejo.gate(event, projected, rules, FLOWS, self_id=SELF, authorized=verdict, delivery="fj-guid-1")


def reason(found: object) -> str | None:
    return found.reason if isinstance(found, Drop) else None


def test_forgejo_words() -> None:
    job = gate("issues", delivery("label_updated", issue=issue(["pi:go"])))
    assert job["flow"] == "fix" and job["trigger"]["action"] == "label_updated"
    assert reason(gate("issues", delivery("label_cleared", issue=issue(["pi:go"])))) == "action-not-actionable"
    synced = gate("pull_request", delivery("synchronized", pull_request=pr()))
    assert synced["trigger"]["matched"] == {"index": 3, "type": "pull_request", "action": "synchronized"}
    for action in ("edited", "assigned", "reviewed", "milestoned"):
        assert reason(gate("issues", delivery(action, issue=issue(["pi:go"])))) == "action-not-actionable"
    for action in ("banana", "", "labeled", "synchronize"):
        assert reason(gate("issues", delivery(action, issue=issue(["pi:go"])))) == "unhandled-event"


@pytest.mark.parametrize(
    ("event", "word", "mapped"),
    [
        ("issues", "label_updated", "labeled"),
        ("issues", "opened", "opened"),
        ("issues", "reopened", "reopened"),
        ("issues", "closed", "closed"),
        ("issues", "label_cleared", None),
        ("issues", "synchronized", None),
        ("pull_request", "synchronized", "synchronize"),
        ("pull_request", "closed", "closed"),
    ],
)
def test_map_action(event: str, word: str, mapped: str | None) -> None:
    assert forge_forgejo.map_action(event, word) == mapped
    assert "label_cleared" in forge_forgejo.NOT_ACTIONABLE


def test_comments_and_the_verdict() -> None:
    on_pr = gate("issue_comment", delivery("created", issue=issue(), comment={"body": "@pi"}, is_pull=True))
    assert on_pr["target"] == {"type": "pull_request", "number": 7, "title": "T", "body": "B"}
    assert on_pr["trigger"]["comment"] == {"body": "@pi"}
    assert (
        gate("issue_comment", delivery("created", issue=issue(), comment={"body": "@pi"}))["target"]["type"] == "issue"
    )
    assert (
        gate("issue_comment", delivery("created", issue=issue(), comment={"body": "@pi"}, is_pull="true"))["target"][
            "type"
        ]
        == "issue"
    )
    bodies = (
        ("issues", delivery("label_updated", issue=issue(["pi:go"]))),
        ("issue_comment", delivery("created", issue=issue(), comment={"body": "@pi"})),
        ("pull_request", delivery("opened", pull_request=pr())),
    )
    for event, body in bodies:
        for verdict in (False, None, "true", 1, {}):
            assert reason(gate(event, body, verdict=verdict)) == "author-not-allowed"
    assert reason(gate("issue_comment", delivery("created", SELF, issue=issue(), comment={"body": "@pi"}))) == "self"
    assert reason(gate("issues", delivery("label_updated", None, issue=issue(["pi:go"])))) == "missing-sender-id"
    assert "alice" not in str(gate("issues", delivery("label_updated", issue=issue(["pi:go"]))))
    labelled = gate("pull_request", delivery("label_updated", pull_request=pr(["pi:review"])))
    assert labelled["trigger"]["matched"] == {"index": 2, "type": "pull_request", "action": "label_updated"}
    assert labelled["target"]["head"] == {"ref": "feat", "sha": "abc123", "repo": {"full_name": "fork/widgets"}}


def test_commands_replicas_and_secrets() -> None:
    commanded = ForgeRules(label=(fj(0, "label", {"command": "deploy"}, any=["pi:go"]),))
    job = gate("issues", delivery("label_updated", issue=issue(["pi:go"])), commanded)
    assert list(job) == ["repo", "target", "command", "trigger"]
    wide = ForgeRules(label=(fj(0, "label", {"flow": "fix", "replicas": 2, "secrets": {"T": "r"}}, any=["pi:go"]),))
    job = gate("issues", delivery("label_updated", issue=issue(["pi:go"])), wide)
    assert job["replicas"] == 2 and job["secrets"] == {"T": "r"} and "secrets" not in job["trigger"]


def test_close_rules() -> None:
    once = gate("issues", delivery("closed", issue=issue()), CLOSING)
    assert once["trigger"]["matched"] == {"index": 4, "type": "issue", "action": "closed", "number": 7, "once": True}
    other = gate("issues", delivery("closed", issue=issue(number=9)), CLOSING)
    assert other["flow"] == "sweep" and "once" not in other["trigger"]["matched"]
    pr_closed = gate("pull_request", delivery("closed", pull_request=pr()), CLOSING)
    assert pr_closed["trigger"]["matched"] == {"index": 6, "type": "pull_request", "action": "closed"}
    assert pr_closed["target"]["head"]["sha"] == "abc123"
    narrowed = ForgeRules(issue=(fj(4, "issue", {"flow": "w"}, actions=["closed"], number=8),))
    assert reason(gate("issues", delivery("closed", issue=issue()), narrowed)) == "close-number-not-matched"
    assert reason(gate("issues", delivery("closed", issue=issue()))) == "no-matching-close-trigger"
    assert reason(gate("pull_request", delivery("closed", pull_request=pr()))) == "no-matching-close-trigger"
    assert reason(gate("issues", delivery("closed", issue=issue()), CLOSING, verdict=False)) == "author-not-allowed"
    for event, body in (
        ("issues", delivery("label_updated", issue=issue(["pi:go"]))),
        ("pull_request", delivery("opened", pull_request=pr())),
    ):
        assert gate(event, body, CLOSING) == gate(event, body)
