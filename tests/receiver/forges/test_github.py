"""The GitHub gate, pure: the reference's filter vectors (receiver-contract §15.2), rule indices echoed verbatim."""

from __future__ import annotations

from typing import Any

import pytest

from pi_dispatch.receiver.forges import github as forge_github
from pi_dispatch.receiver.routes import Drop
from pi_dispatch.receiver.rules import ForgeRules, Rule

SELF = 999
FLOWS = frozenset({"frontend-fix", "triage", "docs", "fix", "review"})


def rule(index: int, on_type: str, run: dict[str, Any] | None = None, **on: Any) -> Rule:
    fields = {key: tuple(value) if isinstance(value, list) else value for key, value in on.items()}
    if "actions" in fields:
        fields["actions"] = frozenset(fields["actions"])
    if "review_states" in fields:
        fields["review_states"] = frozenset(fields["review_states"])
    return Rule(index=index, on_type=on_type, run={"kind": "github", **(run or {})}, **fields)


LABEL = rule(2, "label", {"flow": "frontend-fix"}, any=["pi:frontend"])
COMMENT = rule(4, "comment", {"flow": "triage"}, phrase="@pi")
PR_LABELED = rule(3, "pull_request", {"flow": "review"}, actions=["labeled"], any=["pi:review"])
PR_OPENED = rule(6, "pull_request", {"flow": "review"}, actions=["opened", "synchronize", "reopened"])
REVIEW = rule(8, "pull_request", {"flow": "address-review"}, actions=["review_submitted"])
RULES = ForgeRules(label=(LABEL,), comment=COMMENT, pull_request=(PR_LABELED, PR_OPENED, REVIEW))


def issue(labels: list[str] | None = None, number: object = 42, pull: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {"number": number, "title": "T", "body": "B", "labels": [{"name": n} for n in labels or []]}
    if pull:
        body["pull_request"] = {"url": "https://api.github.com/repos/octo/repo/pulls/55"}
    return body


def pr(
    association: str | None = "COLLABORATOR", labels: list[str] | None = None, number: object = 12
) -> dict[str, Any]:
    found: dict[str, Any] = {
        "number": number,
        "title": "PR",
        "body": "D",
        "labels": [{"name": n} for n in labels or []],
        "head": {"ref": "feat", "sha": "abc", "repo": {"full_name": "fork/x"}},
        "base": {"ref": "main"},
    }
    if association is not None:
        found["author_association"] = association
    return found


def payload(action: str, sender: object = 7, **parts: Any) -> dict[str, Any]:
    """A delivery; a `labeled` one adds its item's first label unless `label` says which."""
    body = {"action": action, "sender": {"id": sender, "login": "alice"}, "repository": {"full_name": "octo/repo"}}
    item = parts.get("issue") or parts.get("pull_request")
    if action == "labeled" and "label" not in parts and isinstance(item, dict) and item["labels"]:
        parts["label"] = item["labels"][0]
    return body | parts


def gate(event: str, body: dict[str, Any], rules: ForgeRules = RULES, authority: object = True) -> Any:
    """The gate's verdict; the sender has write access unless `authority` says otherwise."""
    return forge_github.gate(
        event, forge_github.project(body), rules, FLOWS, self_id=SELF, delivery="d-1", authority=authority
    )


def reason(verdict: object) -> str | None:
    return verdict.reason if isinstance(verdict, Drop) else None


def test_identity_comes_first() -> None:
    comment = {"body": "@pi help", "author_association": "OWNER"}
    assert reason(gate("issue_comment", payload("created", SELF, issue=issue(), comment=comment))) == "self"
    for sender in ("7", "999", None):
        assert reason(gate("issue_comment", payload("created", sender, issue=issue(), comment=comment))) == (
            "missing-sender-id"
        )
    no_sender = payload("created", issue=issue(), comment=comment)
    no_sender["sender"] = {}
    assert reason(gate("issue_comment", no_sender)) == "missing-sender-id"
    del no_sender["sender"]
    assert reason(gate("issue_comment", no_sender)) == "missing-sender-id"
    assert reason(gate("issues", payload("labeled", True, issue=issue(["pi:frontend"])))) == "missing-sender-id"


def test_a_label_job_is_exactly_the_reference_literal() -> None:
    assert reason(gate("issues", payload("labeled", issue=issue(["bug"])))) == "no-allowlisted-label"
    job = gate("issues", payload("labeled", issue=issue(["pi:frontend"])))
    assert job == {
        "repo": "octo/repo",
        "target": {"type": "issue", "number": 42, "title": "T", "body": "B"},
        "flow": "frontend-fix",
        "trigger": {
            "event": "issues",
            "action": "labeled",
            "deliveryId": "d-1",
            "sender": {"id": 7},
            "matched": {"index": 2, "type": "label", "label": "pi:frontend"},
        },
    }
    assert list(job) == ["repo", "target", "flow", "trigger"]
    assert list(job["trigger"]) == ["event", "action", "deliveryId", "sender", "matched"]
    both = issue(["bug", "pi:frontend"])
    assert gate("issues", payload("labeled", issue=both, label={"name": "pi:frontend"}))["flow"] == "frontend-fix"
    for action in ("opened", "reopened"):
        assert gate("issues", payload(action, issue=issue(["pi:frontend"])))["trigger"]["action"] == action


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        (["ai-fix", "triaged"], ("fix", "ai-fix")),
        (["ai-fix"], None),
        (["ai-fix", "triaged", "blocked"], None),
        (["ai-fix", "triaged", "ai-review"], ("fix", "ai-fix")),
        (["ai-review"], ("review", "ai-review")),
        (["urgent-fix", "triaged"], ("fix", "urgent-fix")),
    ],
)
def test_the_label_predicate_matrix(labels: list[str], expected: tuple[str, str] | None) -> None:
    fix = rule(2, "label", {"flow": "fix"}, any=["ai-fix", "urgent-fix"], all=["triaged"], none=["blocked", "wontfix"])
    review = rule(5, "label", {"flow": "review"}, any=["ai-review"])
    verdict = gate("issues", payload("labeled", issue=issue(labels)), ForgeRules(label=(fix, review)))
    if expected is None:
        assert reason(verdict) == "no-allowlisted-label"
    else:
        assert (verdict["flow"], verdict["trigger"]["matched"]["label"]) == expected


def test_an_all_only_rule_reports_its_first_label() -> None:
    only_all = rule(1, "label", {"flow": "fix"}, all=["triaged", "approved"])
    verdict = gate("issues", payload("labeled", issue=issue(["triaged", "approved"])), ForgeRules(label=(only_all,)))
    assert verdict["trigger"]["matched"] == {"index": 1, "type": "label", "label": "triaged"}


def test_comments() -> None:
    no_default = ForgeRules(comment=rule(4, "comment", {}, phrase="@pi"))

    def comment(body: str, rules: ForgeRules = RULES, **extra: Any) -> Any:
        association = extra.pop("association", "OWNER")
        parts = {"issue": issue(**extra), "comment": {"body": body, "author_association": association}}
        return gate("issue_comment", payload("created", **parts), rules)

    assert reason(comment("@pi please help", no_default)) == "no-flow"
    override = comment("@pi frontend-fix please", no_default)
    assert override["flow"] == "frontend-fix" and override["trigger"]["matched"] == {
        "index": 4,
        "type": "comment",
        "phrase": "@pi",
    }
    assert reason(comment("just a normal comment")) == "no-trigger-phrase"
    default = comment("hey @pi take a look")
    assert default["flow"] == "triage"
    assert default["trigger"]["comment"] == {"body": "hey @pi take a look", "author_association": "OWNER"}
    on_pr = comment("@pi", number=55, pull=True)
    assert on_pr["target"] == {"type": "pull_request", "number": 55, "title": "T", "body": "B"}
    assert reason(comment("@pi", association="NONE")) == "author-not-allowed"
    assert comment("@pi\u00a0docs")["flow"] == "docs"  # JavaScript's \s includes the no-break space
    assert comment("@pi\ufeffdocs")["flow"] == "docs"  # and U+FEFF, which Python's does not


def test_pull_requests() -> None:
    labeled = gate("pull_request", payload("labeled", pull_request=pr("NONE", ["pi:review"])))
    assert labeled["target"] == {
        "type": "pull_request",
        "number": 12,
        "title": "PR",
        "body": "D",
        "head": {"ref": "feat", "sha": "abc", "repo": "fork/x"},
        "base": {"ref": "main"},
    }
    assert labeled["trigger"]["matched"] == {"index": 3, "type": "pull_request", "action": "labeled"}
    assert reason(gate("pull_request", payload("labeled", pull_request=pr(labels=["chore"])))) == (
        "no-matching-pr-trigger"
    )
    opened = gate("pull_request", payload("opened", pull_request=pr("COLLABORATOR")))
    assert opened["trigger"]["matched"] == {"index": 6, "type": "pull_request", "action": "opened"}
    for association in ("NONE", "CONTRIBUTOR", "FIRST_TIME_CONTRIBUTOR", None):
        assert reason(gate("pull_request", payload("opened", pull_request=pr(association)))) == "pr-author-not-allowed"
    assert gate("pull_request", payload("synchronize", pull_request=pr("MEMBER")))["flow"] == "review"
    assert reason(gate("pull_request", payload("reopened", pull_request=pr("NONE")))) == "pr-author-not-allowed"
    assert reason(gate("pull_request", payload("synchronize", SELF, pull_request=pr("MEMBER")))) == "self"
    assert reason(gate("pull_request", payload("closed", pull_request=pr()))) == "no-matching-close-trigger"
    assert reason(gate("pull_request", payload("opened"))) == "missing-pull-request"


def review(
    state: str = "changes_requested", body: object = "rename the helper", who: str | None = "COLLABORATOR"
) -> Any:
    found: dict[str, Any] = {"id": 777, "body": body, "state": state, "user": {"login": "bob"}}
    if who is not None:
        found["author_association"] = who
    return found


def test_reviews() -> None:
    fired = gate("pull_request_review", payload("submitted", pull_request=pr("NONE"), review=review()))
    assert fired["flow"] == "address-review"
    assert fired["trigger"]["event"] == "pull_request_review" and fired["trigger"]["action"] == "submitted"
    assert fired["trigger"]["matched"] == {"index": 8, "type": "pull_request", "action": "review_submitted"}
    assert fired["trigger"]["review"] == {
        "id": 777,
        "body": "rename the helper",
        "state": "changes_requested",
        "author_association": "COLLABORATOR",
    }
    for who in ("NONE", "CONTRIBUTOR", "FIRST_TIME_CONTRIBUTOR", None):
        verdict = gate("pull_request_review", payload("submitted", pull_request=pr(), review=review(who=who)))
        assert reason(verdict) == "review-author-not-allowed"
    assert reason(gate("pull_request_review", payload("submitted", pull_request=pr()))) == "review-author-not-allowed"
    assert reason(gate("pull_request_review", payload("submitted", SELF, pull_request=pr(), review=review()))) == "self"
    for state in ("commented", "COMMENTED"):
        for body in (None, "", "   "):
            verdict = gate("pull_request_review", payload("submitted", pull_request=pr(), review=review(state, body)))
            assert reason(verdict) == "no-review-body"
        no_body = review(state)
        del no_body["body"]
        assert reason(gate("pull_request_review", payload("submitted", pull_request=pr(), review=no_body))) == (
            "no-review-body"
        )
    assert gate("pull_request_review", payload("submitted", pull_request=pr(), review=review("commented", "ok")))
    for state in ("approved", "changes_requested"):
        assert gate("pull_request_review", payload("submitted", pull_request=pr(), review=review(state, "")))
    stranger = review("commented", "", "NONE")
    assert reason(gate("pull_request_review", payload("submitted", pull_request=pr(), review=stranger))) == (
        "review-author-not-allowed"
    )
    for action in ("edited", "dismissed"):
        assert reason(gate("pull_request_review", payload(action, pull_request=pr(), review=review()))) == (
            "unhandled-event"
        )
    for action in ("review_submitted", "submitted"):
        assert reason(gate("pull_request", payload(action, pull_request=pr()))) == "unhandled-event"


def test_review_narrowing() -> None:
    narrowed = ForgeRules(
        pull_request=(rule(8, "pull_request", {"flow": "r"}, actions=["review_submitted"], any=["pi:review"]),)
    )
    labelled = gate(
        "pull_request_review", payload("submitted", pull_request=pr(labels=["pi:review"]), review=review()), narrowed
    )
    assert labelled["flow"] == "r"
    chore = gate(
        "pull_request_review", payload("submitted", pull_request=pr(labels=["chore"]), review=review()), narrowed
    )
    assert reason(chore) == "no-matching-pr-trigger"
    no_review_rule = ForgeRules(pull_request=(PR_OPENED,))
    assert reason(
        gate("pull_request_review", payload("submitted", pull_request=pr(), review=review()), no_review_rule)
    ) == ("no-matching-pr-trigger")
    states = ForgeRules(
        pull_request=(
            rule(8, "pull_request", {"flow": "r"}, actions=["review_submitted"], review_states=["changes_requested"]),
        )
    )
    assert gate("pull_request_review", payload("submitted", pull_request=pr(), review=review()), states)["flow"] == "r"
    for state in ("approved", "commented"):
        verdict = gate(
            "pull_request_review", payload("submitted", pull_request=pr(), review=review(state, "x")), states
        )
        assert reason(verdict) == "review-state-not-matched"
    stranger = review("approved", "x", "NONE")
    assert reason(gate("pull_request_review", payload("submitted", pull_request=pr(), review=stranger), states)) == (
        "review-author-not-allowed"
    )


def test_execution_fields_come_from_the_rule_that_matched() -> None:
    first = rule(0, "label", {"flow": "a", "image": "img:1", "packages": False, "resume": True}, any=["x"])
    second = rule(1, "label", {"flow": "b", "replicas": 2, "secrets": {"T": "ref"}, "secretsProfile": "p"}, any=["x"])
    body = payload("labeled", issue=issue(["x"]))
    job = gate("issues", body, ForgeRules(label=(first, second)))
    assert (job["flow"], job["image"], job["packages"], job["resume"]) == ("a", "img:1", False, True)
    assert "replicas" not in job and "secrets" not in job
    swapped = gate("issues", body, ForgeRules(label=(second, first)))
    assert (swapped["flow"], swapped["replicas"], swapped["secrets"], swapped["secretsProfile"]) == (
        "b",
        2,
        {"T": "ref"},
        "p",
    )
    assert not {"image", "secrets", "replicas", "secretsProfile"} & set(swapped["trigger"])
    command = rule(0, "label", {"command": "deploy --now"}, any=["x"])
    assert list(gate("issues", body, ForgeRules(label=(command,)))) == ["repo", "target", "command", "trigger"]


def test_a_command_comment_fires_on_the_phrase_alone() -> None:
    commanded = ForgeRules(comment=rule(4, "comment", {"command": "summarize"}, phrase="@pi"))
    for body in ("@pi", "@pi docs", "@pi somethingelse entirely"):
        parts = {"issue": issue(), "comment": {"body": body, "author_association": "OWNER"}}
        job = gate("issue_comment", payload("created", **parts), commanded)
        assert job["command"] == "summarize" and "flow" not in job


def test_other_events() -> None:
    assert reason(gate("push", payload("created"))) == "unhandled-event"
    assert reason(gate("issues", payload("edited", issue=issue(["pi:frontend"])))) == "unhandled-event"


ISSUE_CLOSE = rule(1, "issue", {"flow": "wrapup"}, actions=["closed"], number=40, once=True)
PR_CLOSE = rule(3, "pull_request", {"flow": "pr-wrap"}, actions=["closed"], number=12, once=True)
CLOSING = ForgeRules(
    label=(LABEL,), comment=COMMENT, pull_request=(PR_OPENED,), issue=(ISSUE_CLOSE,), pr_close=(PR_CLOSE,)
)


def test_close_rules() -> None:
    closed = gate("issues", payload("closed", issue=issue(number=40)), CLOSING, True)
    assert closed["flow"] == "wrapup"
    assert closed["trigger"]["matched"] == {"index": 1, "type": "issue", "action": "closed", "number": 40, "once": True}
    unnarrowed = ForgeRules(issue=(rule(1, "issue", {"flow": "sweep"}, actions=["closed"]),))
    assert gate("issues", payload("closed", issue=issue(number=77)), unnarrowed, True)["trigger"]["matched"] == {
        "index": 1,
        "type": "issue",
        "action": "closed",
        "number": 77,
    }
    assert (
        reason(gate("issues", payload("closed", issue=issue(number=41)), CLOSING, True)) == "close-number-not-matched"
    )
    assert reason(gate("issues", payload("closed", issue=issue(number=40)), RULES, True)) == "no-matching-close-trigger"
    for verdict in (False, None, "true", 1):
        assert (
            reason(gate("issues", payload("closed", issue=issue(number=40)), CLOSING, verdict)) == "closer-not-allowed"
        )
    assert reason(gate("issues", payload("closed", SELF, issue=issue(number=40)), CLOSING, True)) == "self"
    assert reason(gate("pull_request", payload("closed", pull_request=pr("COLLABORATOR")), CLOSING, False)) == (
        "closer-not-allowed"
    )
    pr_closed = gate("pull_request", payload("closed", pull_request=pr("NONE")), CLOSING, True)
    assert pr_closed["trigger"]["matched"] == {"index": 3, "type": "pull_request", "action": "closed", "once": True}
    assert pr_closed["target"]["head"] == {"ref": "feat", "sha": "abc", "repo": "fork/x"}
    not_once = ForgeRules(issue=(rule(1, "issue", {"flow": "w"}, actions=["closed"], number=40, once=False),))
    assert "once" not in gate("issues", payload("closed", issue=issue(number=40)), not_once, True)["trigger"]["matched"]
    assert reason(gate("pull_request", payload("closed"), CLOSING, True)) == "missing-pull-request"
    for number in (None, "40"):
        assert reason(gate("issues", payload("closed", issue=issue(number=number)), CLOSING, True)) == (
            "missing-issue-number"
        )
    assert reason(gate("pull_request", payload("closed", pull_request=pr(number=None)), CLOSING, True)) == (
        "missing-pull-request"
    )
    # armed close rules change nothing for label and PR verdicts
    for event, body in (
        ("issues", payload("labeled", issue=issue(["pi:frontend"]))),
        ("pull_request", payload("opened", pull_request=pr("COLLABORATOR"))),
    ):
        assert gate(event, body, CLOSING) == gate(
            event, body, ForgeRules(label=(LABEL,), comment=COMMENT, pull_request=(PR_OPENED,))
        )


def test_a_projection_keeps_only_the_subset() -> None:
    body = payload("labeled", issue=issue(["pi:frontend"]), extra={"token": "x"})
    body["sender"]["email"] = "alice@example.com"
    projected = forge_github.project(body)
    assert set(projected) == {"action", "sender", "issue", "label", "comment", "repository", "carries"}
    assert projected["sender"] == {"id": 7, "login": "alice"}
    job = gate("issues", body)
    assert "alice" not in str(job) and "example.com" not in str(job)
    with pytest.raises(TypeError):
        forge_github.project(None)
    for hostile in ([], "x", 5, {"issue": None}, {"issue": {"labels": "x"}}, {"pull_request": 1}, {"review": []}):
        assert isinstance(gate("issues", hostile if isinstance(hostile, dict) else {}), Drop)
        forge_github.project(hostile)


def test_every_forge_routes_its_loaders_vocabulary_less_the_close_word() -> None:
    from pi_dispatch.core.jobs import PR_CLOSE_ACTION
    from pi_dispatch.receiver.forges import azure as forge_azure
    from pi_dispatch.receiver.forges import forgejo as forge_forgejo
    from pi_dispatch.receiver.forges import gitlab as forge_gitlab
    from pi_dispatch.triggers.file import PR_ACTIONS, REVIEW_ACTION

    assert set(forge_github.PR_ACTIONS) == set(PR_ACTIONS["github"]) - {PR_CLOSE_ACTION["github"], REVIEW_ACTION}
    assert set(forge_gitlab.MR_ACTIONS) == set(PR_ACTIONS["gitlab"]) - {PR_CLOSE_ACTION["gitlab"]}
    mapped = {word for word in PR_ACTIONS["forgejo"] if forge_forgejo.map_action("pull_request", word)}
    assert mapped == set(PR_ACTIONS["forgejo"])
    assert set(forge_azure.PR_EVENTS.values()) == set(PR_ACTIONS["azure"]) and "azure" not in PR_CLOSE_ACTION


def test_wait_and_secrets_reach_the_job_on_every_forge_and_never_its_trigger() -> None:
    import dataclasses

    from pi_dispatch.receiver.forges import azure as forge_azure
    from pi_dispatch.receiver.forges import gitlab as forge_gitlab

    carried = {"flow": "fix", "waitFor": [{"profile": "ci"}], "secretsProfile": "prod", "secrets": {"T": "ref"}}
    label = rule(0, "label", carried, any=["pi:fix"])
    github = gate("issues", payload("labeled", issue=issue(["pi:fix"])), ForgeRules(label=(label,)))
    gitlab_rule = dataclasses.replace(label, run={**label.run, "kind": "gitlab"})
    gitlab_body = {
        "object_kind": "issue",
        "user": {"id": 7},
        "project": {"id": 1, "path_with_namespace": "g/p"},
        "object_attributes": {"iid": 3, "action": "open", "labels": [{"title": "pi:fix"}]},
    }
    gitlab = forge_gitlab.gate(
        forge_gitlab.project(gitlab_body), ForgeRules(label=(gitlab_rule,)), FLOWS,
        self_id=SELF, authorized=True, delivery="wh-1",
    )  # fmt: skip
    azure_rule = dataclasses.replace(label, run={**label.run, "kind": "azure", "repository": "r"})
    azure_body = {
        "id": "d",
        "eventType": "workitem.created",
        "resource": {"id": 4, "createdBy": {"id": "g"}, "fields": {"System.TeamProject": "P", "System.Tags": "pi:fix"}},
    }
    azure = forge_azure.gate(
        forge_azure.project(azure_body), ForgeRules(label=(azure_rule,)), FLOWS,
        self_id={}, authorized=True, delivery="d",
    )  # fmt: skip
    for job in (github, gitlab, azure):
        assert job["waitFor"] == [{"profile": "ci"}] and job["secretsProfile"] == "prod"
        assert not {"waitFor", "secretsProfile", "secrets"} & set(job["trigger"])
