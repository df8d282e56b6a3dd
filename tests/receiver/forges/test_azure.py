"""The Azure DevOps gate, pure: receiver-contract §15.5 (self is {id: self-guid, email: pi-bot@example.com})."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest

from pi_dispatch.receiver.forges import azure as forge_azure
from pi_dispatch.receiver.routes import Drop
from pi_dispatch.receiver.rules import ForgeRules, Rule
from tests.receiver.forges.test_github import rule

SELF = {"id": "self-guid", "email": "pi-bot@example.com"}
FLOWS = frozenset({"fix", "triage", "review"})


def az(index: int, on_type: str, run: dict[str, Any], **on: Any) -> Rule:
    made = rule(index, on_type, run, **on)
    return dataclasses.replace(made, run={**made.run, "kind": "azure"})


LABEL = az(0, "label", {"flow": "fix", "repository": "widgets"}, any=["pi:go"])
COMMENT = az(1, "comment", {"flow": "triage", "repository": "widgets"}, phrase="@pi")
PRS = az(2, "pull_request", {"flow": "review"}, actions=["created", "updated"])
RULES = ForgeRules(label=(LABEL,), comment=COMMENT, pull_request=(PRS,))


def work_item(
    event: str, fields: dict[str, Any], diff: dict[str, Any] | None = None, **resource: Any
) -> dict[str, Any]:
    current = {"System.TeamProject": "Fabrikam", "System.Title": "T", "System.Description": "D"} | fields
    body = {
        "id": "delivery-guid-1",
        "eventType": event,
        "resourceContainers": {"project": {"id": "proj-guid"}},
        "resource": {"workItemId": 7, "revision": {"fields": current}} | resource,
    }
    if diff is not None:
        body["resource"]["fields"] = diff
    return body


def pull_request(event: str, created_by: str = "dev-guid", comment: str | None = None) -> dict[str, Any]:
    pr = {
        "pullRequestId": 12,
        "title": "PR",
        "description": "D",
        "sourceRefName": "refs/heads/feature",
        "targetRefName": "refs/heads/main",
        "createdBy": {"id": created_by},
        "repository": {"id": "repo-guid", "name": "widgets", "project": {"id": "proj-guid", "name": "Fabrikam"}},
    }
    if comment is None:
        return {"id": "delivery-guid-2", "eventType": event, "resource": pr}
    resource = {"pullRequest": pr, "comment": {"content": comment, "author": {"id": created_by}}}
    return {"id": "delivery-guid-3", "eventType": event, "resource": resource}


def gate(body: dict[str, Any], rules: ForgeRules = RULES, verdict: object = True, self_id: object = SELF) -> Any:
    projected = forge_azure.project(body)
    return forge_azure.gate(projected, rules, FLOWS, self_id=self_id, authorized=verdict, delivery=body.get("id"))


def reason(found: object) -> str | None:
    return found.reason if isinstance(found, Drop) else None


CHANGED_BY = {"System.ChangedBy": "Dev Person <dev@example.com>"}


def test_tags_fire_on_what_an_update_added() -> None:
    job = gate(
        work_item(
            "workitem.updated",
            {**CHANGED_BY, "System.Tags": "pi:go"},
            {"System.Tags": {"oldValue": "", "newValue": "pi:go"}},
        )
    )
    assert job["flow"] == "fix" and job["repo"] == "Fabrikam/widgets"
    assert job["azure"] == {"project": "Fabrikam", "projectId": "proj-guid", "repository": "widgets"}
    assert list(job) == ["repo", "azure", "target", "flow", "trigger"]
    assert job["trigger"]["action"] == "updated" and job["target"] == {
        "type": "issue",
        "number": 7,
        "title": "T",
        "body": "D",
    }
    title_only = work_item("workitem.updated", CHANGED_BY, {"System.Title": {"oldValue": "a", "newValue": "T"}})
    assert reason(gate(title_only)) == "no-label-change"
    removed = work_item(
        "workitem.updated", CHANGED_BY, {"System.Tags": {"oldValue": "pi:go;other", "newValue": "other"}}
    )
    assert reason(gate(removed)) == "no-label-change"
    other = work_item("workitem.updated", CHANGED_BY, {"System.Tags": {"oldValue": "pi:go", "newValue": "pi:go;other"}})
    assert reason(gate(other)) == "no-allowlisted-label"  # `other` was added, and no rule names it
    created = work_item("workitem.created", {"System.CreatedBy": "dev@example.com", "System.Tags": "pi:go"})
    assert gate(created)["trigger"]["action"] == "created"


def test_parse_tags_and_diffs() -> None:
    assert forge_azure.parse_tags("a;b") == forge_azure.parse_tags("a; b ; ") == [{"name": "a"}, {"name": "b"}]
    assert forge_azure.parse_tags(None) == []
    only_new = forge_azure.project(work_item("workitem.updated", CHANGED_BY, {"System.Tags": {"newValue": "a"}}))
    assert only_new["tagChanges"] == {"previous": [], "current": [{"name": "a"}]}
    assert "tagChanges" not in forge_azure.project(work_item("workitem.updated", CHANGED_BY, {}))


def test_self_by_guid_or_email() -> None:
    comment = {"System.ChangedBy": "pi-dispatch <PI-BOT@Example.com>", "System.History": "@pi"}
    assert reason(gate(work_item("workitem.commented", comment))) == "self"
    impostor = {"System.ChangedBy": "pi-bot@example.com is not me <mallory@evil.test>", "System.History": "@pi"}
    assert gate(work_item("workitem.commented", impostor))["flow"] == "triage"
    assert reason(gate(pull_request("git.pullrequest.created", "self-guid"))) == "self"
    assert gate(pull_request("git.pullrequest.created", "someone"), self_id={"id": "self-guid"})
    email_actor = work_item("workitem.commented", {"System.ChangedBy": "pi-bot@example.com", "System.History": "@pi"})
    assert gate(email_actor, self_id={"id": "self-guid"})["flow"] == "triage"
    assert gate(pull_request("git.pullrequest.created", "self-guid"), self_id={"email": "pi-bot@example.com"})
    nobody = work_item("workitem.commented", {"System.History": "@pi"})
    assert reason(gate(nobody)) == "missing-sender-id"


@pytest.mark.parametrize(
    ("text", "email"),
    [
        ("Dev Person <Dev@Example.com>", "dev@example.com"),
        ("dev@example.com", "dev@example.com"),
        ("a@b.test <c@d.test>", "c@d.test"),
        ("Dev Person", None),
        ("not an address@", None),
    ],
)
def test_extract_email(text: str, email: str | None) -> None:
    assert forge_azure.extract_email(text) == email


def test_actor_prefers_the_guid() -> None:
    projected = forge_azure.project(pull_request("ms.vss-code.git-pullrequest-comment-event", "guid-1", "@pi"))
    assert projected["actor"] == {"id": "guid-1"}


def test_verdicts_prs_comments_and_other_events() -> None:
    tagged = work_item("workitem.created", {**CHANGED_BY, "System.Tags": "pi:go"})
    for verdict in (False, None, "true", 1):
        assert reason(gate(tagged, verdict=verdict)) == "author-not-allowed"
    job = gate(pull_request("git.pullrequest.updated"))
    assert job["repo"] == "Fabrikam/widgets" and job["azure"]["repositoryId"] == "repo-guid"
    assert job["target"]["head"] == {"ref": "feature"} and job["target"]["base"] == {"ref": "main"}
    assert job["trigger"]["action"] == "updated" and job["trigger"]["sender"] == {"id": "dev-guid"}
    commented = gate(pull_request("ms.vss-code.git-pullrequest-comment-event", "dev-guid", "@pi please"))
    assert commented["target"]["type"] == "pull_request" and commented["flow"] == "triage"
    assert commented["trigger"]["comment"] == {"body": "@pi please"}
    for event in ("git.push", "workitem.deleted"):
        assert reason(gate(work_item(event, CHANGED_BY))) == "unhandled-event"
    assert reason(gate(pull_request("git.pullrequest.created"), ForgeRules(label=(LABEL,)))) == "no-matching-pr-trigger"


def test_email_actors_are_named_by_a_hash() -> None:
    def sender(email: str) -> Any:
        body = work_item("workitem.created", {"System.CreatedBy": email, "System.Tags": "pi:go"})
        return gate(body)["trigger"]["sender"]["id"]

    first = sender("Dev <dev@example.com>")
    assert re.fullmatch(r"azid-[0-9a-f]{16}", first)
    assert sender("dev@example.com") == first and sender("other@example.com") != first
    job = gate(work_item("workitem.created", {"System.CreatedBy": "dev@example.com", "System.Tags": "pi:go"}))
    assert "dev@example.com" not in str(job)
    assert gate(pull_request("git.pullrequest.created", "guid-7"))["trigger"]["sender"] == {"id": "guid-7"}


def test_commands_and_repositories() -> None:
    commanded = ForgeRules(label=(az(0, "label", {"command": "deploy", "repository": "widgets"}, any=["pi:go"]),))
    job = gate(work_item("workitem.created", {**CHANGED_BY, "System.Tags": "pi:go"}), commanded)
    assert list(job) == ["repo", "azure", "target", "command", "trigger"]
    no_repository = ForgeRules(label=(az(0, "label", {"flow": "fix"}, any=["pi:go"]),))
    assert reason(gate(work_item("workitem.created", {**CHANGED_BY, "System.Tags": "pi:go"}), no_repository)) == (
        "no-repository"
    )
