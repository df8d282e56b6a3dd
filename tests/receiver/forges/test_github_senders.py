"""Who may fire a GitHub rule (issue 53), pure: the sender's looked-up permission decides every route, a `labeled`
event fires only the rule naming the label it added, and a comment rule's secrets stay with its own flow."""

from __future__ import annotations

from typing import Any

from pi_dispatch.receiver.forges import github as forge_github
from pi_dispatch.receiver.rules import ForgeRules
from tests.receiver.forges.test_github import (
    CLOSING,
    FLOWS,
    ISSUE_CLOSE,
    PR_CLOSE,
    RULES,
    SELF,
    gate,
    issue,
    payload,
    pr,
    reason,
    review,
    rule,
)


def test_the_sender_is_looked_up_only_when_a_rule_would_fire() -> None:
    def wants(event: str, body: dict[str, Any], rules: ForgeRules | None = CLOSING) -> bool:
        return forge_github.wants_sender_authority(event, forge_github.project(body), rules, FLOWS, SELF)

    assert not wants("issues", payload("closed", "7", issue=issue(number=40)))
    assert not wants("issues", payload("closed", SELF, issue=issue(number=40)))
    assert not wants("issues", payload("closed", issue=issue(number=40)), None)
    assert not wants("issues", payload("closed", issue=issue(number=40)), ForgeRules())
    assert not wants("issues", payload("closed", issue=issue(number=41)))
    assert wants("issues", payload("closed", issue=issue(number=40)))
    assert wants("pull_request", payload("closed", pull_request=pr()))
    unnarrowed = ForgeRules(pr_close=(rule(3, "pull_request", {"flow": "w"}, actions=["closed"]),))
    assert not wants("pull_request", payload("closed"), unnarrowed)
    assert not wants("issues", payload("closed", issue=issue(number="40")))
    # every route that would start a job asks, not only a close
    assert wants("issues", payload("labeled", issue=issue(["pi:frontend"])))
    assert wants("issues", payload("reopened", issue=issue(["pi:frontend"])))
    assert not wants("issues", payload("labeled", issue=issue(["bug"])))
    comment = {"body": "@pi", "author_association": "MEMBER"}
    assert wants("issue_comment", payload("created", issue=issue(), comment=comment))
    assert not wants(
        "issue_comment", payload("created", issue=issue(), comment=comment | {"author_association": "NONE"})
    )
    assert not wants("issue_comment", payload("created", issue=issue(), comment=comment | {"body": "thanks"}))
    assert wants("pull_request", payload("opened", pull_request=pr("COLLABORATOR")), RULES)
    assert not wants("pull_request", payload("opened", pull_request=pr("NONE")), RULES)
    assert not ForgeRules().has_close and ForgeRules(issue=(ISSUE_CLOSE,)).has_close
    assert ForgeRules(pr_close=(PR_CLOSE,)).has_close


def test_an_outsider_cannot_fire_a_label_rule_by_reopening_their_own_issue() -> None:
    """Issue 53: an outsider's issue once labelled pi:frontend, closed and reopened (or opened with it) by its
    author, who has no write access: the rule does not fire again on their text."""
    for action in ("opened", "reopened"):
        refused = gate("issues", payload(action, issue=issue(["pi:frontend"])), authority=False)
        assert reason(refused) == "sender-not-allowed"
        assert gate("issues", payload(action, issue=issue(["pi:frontend"])))["flow"] == "frontend-fix"
    assert reason(gate("issues", payload("labeled", issue=issue(["pi:frontend"])), authority=False)) == (
        "sender-not-allowed"
    )
    for undecided in (None, "true", 1):  # only exactly True lets it through
        assert reason(gate("issues", payload("labeled", issue=issue(["pi:frontend"])), authority=undecided)) == (
            "sender-not-allowed"
        )


def test_an_unrelated_label_does_not_fire_the_rule_of_a_label_the_item_carries() -> None:
    """Issue 53: a triager adds `bug` to an issue (or pull request) that carries the rule's label: nothing runs."""
    carrying = issue(["pi:frontend", "bug"])
    assert reason(gate("issues", payload("labeled", issue=carrying, label={"name": "bug"}))) == "no-allowlisted-label"
    assert reason(gate("issues", payload("labeled", issue=carrying, label=None))) == "no-allowlisted-label"
    fired = gate("issues", payload("labeled", issue=carrying, label={"name": "pi:frontend"}))
    assert fired["flow"] == "frontend-fix" and fired["trigger"]["matched"]["label"] == "pi:frontend"
    on_pr = pr("NONE", ["pi:review", "chore"])
    assert reason(gate("pull_request", payload("labeled", pull_request=on_pr, label={"name": "chore"}))) == (
        "no-matching-pr-trigger"
    )
    assert gate("pull_request", payload("labeled", pull_request=on_pr, label={"name": "pi:review"}))["flow"] == "review"
    refused = gate("pull_request", payload("labeled", pull_request=on_pr, label={"name": "pi:review"}), authority=False)
    assert reason(refused) == "sender-not-allowed"


def test_an_association_is_not_write_access() -> None:
    """Issue 53 (M1): MEMBER is any organisation member and COLLABORATOR may be read-only: the forge's answer
    decides, for comments, pull requests, pushes and reviews alike."""
    member = {"body": "@pi", "author_association": "MEMBER"}
    commented = payload("created", issue=issue(), comment=member)
    assert reason(gate("issue_comment", commented, authority=False)) == "author-not-allowed"
    assert gate("issue_comment", commented)["flow"] == "triage"
    for action in ("opened", "synchronize", "reopened"):
        pushed = payload(action, pull_request=pr("COLLABORATOR"))
        assert reason(gate("pull_request", pushed, authority=False)) == "pr-author-not-allowed"
    submitted = payload("submitted", pull_request=pr(), review=review())
    assert reason(gate("pull_request_review", submitted, authority=False)) == "review-author-not-allowed"
    # the approved commit travels with the job: a later push is a new delivery that needs its own approval
    assert gate("pull_request", payload("opened", pull_request=pr("COLLABORATOR")))["target"]["head"]["sha"] == "abc"


def test_a_comment_cannot_carry_its_rules_secrets_into_another_flow() -> None:
    """Issue 53 (M1): `@pi docs` under a comment rule that binds the prod profile for `deploy` runs nothing; the
    rule's own flow still runs, and a rule binding no secret switches flows as the reference does."""
    guarded = ForgeRules(comment=rule(4, "comment", {"flow": "deploy", "secretsProfile": "prod"}, phrase="@pi"))
    inline = ForgeRules(comment=rule(4, "comment", {"flow": "deploy", "secrets": {"T": "ref"}}, phrase="@pi"))

    def comment(body: str, rules: ForgeRules) -> Any:
        parts = {"issue": issue(), "comment": {"body": body, "author_association": "OWNER"}}
        return gate("issue_comment", payload("created", **parts), rules)

    for rules in (guarded, inline):
        assert reason(comment("@pi docs", rules)) == "flow-not-allowed"
        assert comment("@pi deploy now", rules)["flow"] == "deploy"
        assert comment("@pi please", rules)["flow"] == "deploy"
    assert comment("@pi docs", RULES)["flow"] == "docs"
