"""event.json as the reference writes it (upstream-jobrun.md §5.5, §9.3, §9.7)."""

from __future__ import annotations

from pi_dispatch.core.jobevent import event_text, forge_event, local_event


def issue_job(**trigger: object) -> dict[str, object]:
    return {
        "kind": "github",
        "repo": "owner/name",
        "target": {"type": "issue", "number": 7, "title": "T", "body": "B"},
        "trigger": {
            "event": "issues",
            "action": "labeled",
            "deliveryId": "guid-123",
            "sender": {"id": 42, "login": "someone"},
            "matched": {"index": 2, "type": "label", "label": "bug"},
            **trigger,
        },
        "secrets": {"X": "vault/ref"},
    }


def test_an_issue_event_is_the_delivery_subset() -> None:
    event = forge_event(issue_job())
    assert event == {
        "event": "issues",
        "action": "labeled",
        "delivery": "guid-123",
        "repository": {"full_name": "owner/name"},
        "issue": {"number": 7, "title": "T", "body": "B"},
        "sender": {"id": 42},
        "matched": {"index": 2, "type": "label", "label": "bug"},
    }
    text = event_text(event)
    assert text.startswith('{\n  "event": "issues",') and not text.endswith("\n")
    for absent in ("signature", "x-hub", "token", "login", "vault/ref", "comment"):
        assert absent not in text


def test_a_pull_request_event_carries_head_and_base_and_no_issue() -> None:
    job = issue_job()
    job["target"] = {
        "type": "pull_request",
        "number": 12,
        "title": "T",
        "body": "B",
        "head": {"ref": "feat/cache", "sha": "b" * 40, "repo": "fork/name"},
        "base": {"ref": "main"},
    }
    event = forge_event(job)
    assert event["pull_request"]["head"]["ref"] == "feat/cache" and "issue" not in event
    assert list(event) == ["event", "action", "delivery", "repository", "pull_request", "sender", "matched"]


def test_a_comment_keeps_its_body_and_association_only() -> None:
    job = issue_job(comment={"body": "go", "author_association": "MEMBER", "user": {"login": "x"}})
    assert forge_event(job)["comment"] == {"body": "go", "author_association": "MEMBER"}


def test_local_events() -> None:
    assert list(local_event({"kind": "local"}, "app", "a" * 40)) == ["source", "folder", "sha"]
    assert local_event({"kind": "local"}, "app", "a" * 40)["source"] == "manual"
    cron = {"kind": "local", "trigger": {"id": "nightly-tidy", "pattern": "0 3 * * *"}}
    event = local_event(cron, "app", "a" * 40)
    assert list(event) == ["source", "trigger", "folder", "sha", "scheduledFor", "previousRunAt"]
    assert event["source"] == "cron" and event["scheduledFor"] is None
    assert local_event({"kind": "local", "chainDepth": 1}, "app", "a" * 40)["source"] == "chain"
