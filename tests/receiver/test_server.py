"""The GitHub endpoint end to end over real HTTP, real redis-server and real BullMQ (receiver-contract §15.1, §15.9),
the forge API a local stand-in on its own port; and hostile requests, each answered with its status."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from pi_dispatch.fleet.enqueue import Enqueued, Enqueuer, ForgeRouter
from pi_dispatch.forgeapi.github import GitHubAuth, GitHubTokens
from pi_dispatch.forgeapi.http import ForgeClient
from pi_dispatch.infra.store import StoreAddress
from pi_dispatch.receiver.forges.github.access import github_permission
from tests.support.fakeforge import FakeForge, Reply
from tests.support.receiving import Resolvers, github_headers, queued_jobs, rules_of, served

pytestmark = pytest.mark.redis

LABEL = {"on": {"type": "label", "any": ["pi:frontend"]}, "run": {"kind": "github", "flow": "frontend-fix"}}
COMMENT = {"on": {"type": "comment", "phrase": "@pi"}, "run": {"kind": "github", "flow": "triage"}}
OPENED = {
    "on": {"type": "pull_request", "action": ["opened", "synchronize"]},
    "run": {"kind": "github", "flow": "review"},
}
REVIEW = {
    "on": {"type": "pull_request", "action": ["review_submitted"]},
    "run": {"kind": "github", "flow": "address-review"},
}
ISSUE_CLOSE = {
    "on": {"type": "issue", "action": ["closed"], "number": 40, "once": True},
    "run": {"kind": "github", "flow": "wrapup"},
}
RULES = rules_of(LABEL, COMMENT, OPENED, REVIEW)


def labeled(number: int = 42, sender: int = 1, edition: int = 0) -> dict[str, Any]:
    """A label delivery; each `edition` is another body (GitHub's bodies differ delivery to delivery: its
    `updated_at` and more), so the receiver does not take it for a replay of the first."""
    return {
        "action": "labeled",
        "edition": edition,
        "sender": {"id": sender, "login": "alice-login"},
        "label": {"name": "pi:frontend"},
        "issue": {"number": number, "title": "T", "body": "B", "labels": [{"name": "pi:frontend"}]},
        "repository": {"full_name": "octo/repo"},
    }


def commented(body: str, association: str = "OWNER", sender: int = 1) -> dict[str, Any]:
    return labeled(sender=sender) | {
        "action": "created",
        "comment": {"body": body, "author_association": association, "user": {"login": "alice-login"}},
    }


def pull_request(action: str, association: str, **extra: Any) -> dict[str, Any]:
    pr = {
        "number": 12,
        "title": "PR",
        "body": "D",
        "author_association": association,
        "labels": [],
        "head": {"ref": "feat", "sha": "abc", "repo": {"full_name": "fork/x"}},
        "base": {"ref": "main"},
    }
    return (
        {"action": action, "sender": {"id": 1, "login": "alice-login"}, "pull_request": pr}
        | {"repository": {"full_name": "octo/repo"}}
        | extra
    )


@pytest.fixture
async def fresh(client: Any) -> None:
    """A flushed database (the `client` fixture flushes it)."""


async def test_a_label_delivery_becomes_the_reference_job(valkey_url: str, fresh: None) -> None:
    async with served(valkey_url, RULES) as receiver:
        assert await receiver.github("issues", labeled(), "d-1") == (202, {"status": "queued"})
    jobs = await queued_jobs(valkey_url)
    name, data, opts = jobs["gh-d-1"]
    assert name == "github" and data["kind"] == "github" and data["flow"] == "frontend-fix"
    assert data["target"] == {"type": "issue", "number": 42, "title": "T", "body": "B"}
    assert list(data) == ["kind", "repo", "target", "flow", "trigger"]  # an unflagged job: no replica keys
    assert opts["deduplication"] == {"id": "octo/repo#42:frontend-fix", "ttl": 600_000}
    assert opts["attempts"] == 2 and opts["backoff"] == {"type": "exponential", "delay": 60_000}


async def test_comments_carry_the_comment_and_log_neither_body_nor_login(valkey_url: str, fresh: None) -> None:
    async with served(valkey_url, RULES) as receiver:
        body = "@pi frontend-fix comment-body-marker"
        assert (await receiver.github("issue_comment", commented(body), "d-2"))[0] == 202
        assert (await receiver.github("issue_comment", commented("@pi", "NONE"), "d-3"))[0] == 204
        assert (await receiver.github("issue_comment", commented("@pi", sender=999), "d-4"))[0] == 204
        logs = json.dumps(receiver.log.events)
    data = (await queued_jobs(valkey_url))["gh-d-2"][1]
    assert data["flow"] == "frontend-fix"
    assert data["trigger"]["comment"] == {"body": body, "author_association": "OWNER"}
    assert data["trigger"]["matched"] == {"index": 1, "type": "comment", "phrase": "@pi"}
    assert "comment-body-marker" not in logs and "alice-login" not in logs and "login" not in logs
    assert "author-not-allowed" in logs and '"self"' in logs


async def test_pull_requests_and_reviews(valkey_url: str, fresh: None) -> None:
    review = {
        "id": 777,
        "body": "rename the helper",
        "state": "changes_requested",
        "author_association": "COLLABORATOR",
    }
    async with served(valkey_url, RULES) as receiver:
        assert (await receiver.github("pull_request", pull_request("opened", "COLLABORATOR"), "p-1"))[0] == 202
        submitted = pull_request("submitted", "NONE", review=review)
        assert (await receiver.github("pull_request_review", submitted, "r-1"))[0] == 202
        stranger = pull_request("submitted", "OWNER", review=review | {"author_association": "NONE"})
        assert (await receiver.github("pull_request_review", stranger, "r-2"))[0] == 204
        assert receiver.log.events[-1] == ("dropped", {"delivery": "r-2", "reason": "review-author-not-allowed"})
        assert (await receiver.github("pull_request", pull_request("opened", "NONE"), "p-2"))[0] == 204
        logs = json.dumps(receiver.log.events)
    jobs = await queued_jobs(valkey_url)
    assert set(jobs) == {"gh-p-1", "gh-r-1"}
    opened = jobs["gh-p-1"][1]
    assert opened["flow"] == "review" and opened["target"]["number"] == 12 and opened["target"]["head"]["ref"] == "feat"
    reviewed = jobs["gh-r-1"][1]
    assert reviewed["flow"] == "address-review"
    assert reviewed["trigger"]["review"] == {
        "id": 777,
        "body": "rename the helper",
        "state": "changes_requested",
        "author_association": "COLLABORATOR",
    }
    assert "rename the helper" not in logs


async def test_signatures_and_bodies(valkey_url: str, fresh: None) -> None:
    async with served(valkey_url, RULES) as receiver:
        body = json.dumps(labeled()).encode()
        forged = github_headers(body + b" ", "issues", "d-5")
        assert (await receiver.post("/", body, forged))[0] == 401
        assert await receiver.github("issues", b"{ not valid json", "d-6") == (400, {"error": "invalid-json"})
        assert await receiver.github("issues", b"null", "d-7") == (400, {"error": "invalid-json"})
        assert await receiver.github("issues", labeled(), "d-8", secret="another") == (
            401,
            {"error": "invalid signature"},
        )
    assert await queued_jobs(valkey_url) == {}


class FailingEnqueuer(Enqueuer):
    """A real enqueuer whose n-th add fails, as an add fails when the store drops mid-delivery."""

    def __init__(self, url: str, router: ForgeRouter, fail_on: int) -> None:
        super().__init__(url, router)
        self.calls, self.fail_on = 0, fail_on

    async def enqueue_forge_job(self, kind: str, job: Any) -> Enqueued:
        self.calls += 1
        if self.calls == self.fail_on:
            raise ConnectionError("Connection closed by server.")
        return await super().enqueue_forge_job(kind, job)


async def no_hosts() -> list[dict[str, object]]:
    return []


async def test_replicas_fan_out_and_a_failed_add_answers_503(valkey_url: str, fresh: None) -> None:
    wide = rules_of({"on": LABEL["on"], "run": {**LABEL["run"], "replicas": 2}})
    async with served(valkey_url, wide) as receiver:
        assert (await receiver.github("issues", labeled(), "d-9"))[0] == 202
        assert receiver.events("enqueued")[-1]["replicas"] == 2
    jobs = await queued_jobs(valkey_url)
    assert set(jobs) == {"gh-d-9-r1", "gh-d-9-r2"}
    assert [jobs[f"gh-d-9-r{i}"][1]["replica"] for i in (1, 2)] == [1, 2]
    assert {jobs[key][1]["replicas"] for key in jobs} == {2}
    assert {jobs[key][2]["deduplication"]["id"] for key in jobs} == {
        "octo/repo#42:frontend-fix:r1",
        "octo/repo#42:frontend-fix:r2",
    }
    failing = FailingEnqueuer(StoreAddress(valkey_url), ForgeRouter(no_hosts), fail_on=2)
    async with served(valkey_url, wide, enqueuer=failing) as receiver:
        assert await receiver.github("issues", labeled(43), "d-10") == (503, {"error": "enqueue-failed"})
        assert receiver.events("enqueue_failed")[0]["delivery"] == "d-10"
    assert {"gh-d-10-r1"} == {key for key in await queued_jobs(valkey_url) if key.startswith("gh-d-10")}
    dead = Enqueuer(StoreAddress("redis://127.0.0.1:1"), ForgeRouter(no_hosts), add_timeout_s=2)
    async with served(valkey_url, RULES, enqueuer=dead) as receiver:
        assert await receiver.github("issues", labeled(44), "d-11") == (503, {"error": "enqueue-failed"})


async def test_when_github_is_not_served(valkey_url: str) -> None:
    async with served(valkey_url, RULES, github_secret=None) as receiver:
        status, body = await receiver.github("issues", labeled(), "d-12")
        assert status == 404 and "not configured" in body["error"]
        assert (await receiver.post("/", b"", {}, method="GET"))[0] == 404
        assert (await receiver.post("/anything", b"{}", {}))[0] == 404
        assert (await receiver.github("issues", labeled(), "d-13", secret="tampered"))[0] == 404


@pytest.fixture
def github_api(forge: FakeForge) -> FakeForge:
    """The stand-in, answering as api.github.com."""
    return forge


def permission_resolvers(forge: FakeForge) -> tuple[Resolvers, ForgeClient]:
    client = ForgeClient()
    tokens = GitHubTokens(GitHubAuth("pat", True, forge.url, token="operator-token"), client)
    return Resolvers(github=functools.partial(github_permission, tokens)), client


PERMISSION = "/repos/octo/repo/collaborators/closer-login/permission"


def closed(number: int, sender: int = 7, edition: int = 0) -> dict[str, Any]:
    return labeled(number, sender, edition) | {"action": "closed", "sender": {"id": sender, "login": "closer-login"}}


async def test_a_close_asks_github_about_the_closer(valkey_url: str, fresh: None, github_api: FakeForge) -> None:
    closing = rules_of(LABEL, COMMENT, ISSUE_CLOSE)
    resolvers, forge_client = permission_resolvers(github_api)
    try:
        github_api.answer("GET", PERMISSION, Reply(200, {"permission": "write"}))
        async with served(valkey_url, closing, resolvers=resolvers) as receiver:
            assert (await receiver.github("issues", closed(40), "c-1"))[0] == 202
            logs = json.dumps(receiver.log.events)
        asked = github_api.asked(PERMISSION)
        assert len(asked) == 1 and asked[0].headers["authorization"] == "Bearer operator-token"
        assert asked[0].headers["x-github-api-version"] == "2022-11-28"
        data = (await queued_jobs(valkey_url))["gh-c-1"][1]
        assert data["trigger"]["sender"] == {"id": 7}
        assert data["trigger"]["matched"] == {
            "index": 2,
            "type": "issue",
            "action": "closed",
            "number": 40,
            "once": True,
        }
        assert "closer-login" not in json.dumps(data) + logs

        github_api.answer("GET", PERMISSION, Reply(200, {"permission": "read"}))
        async with served(valkey_url, closing, resolvers=resolvers) as receiver:
            assert (await receiver.github("issues", closed(40, edition=2), "c-2"))[0] == 204
            assert receiver.events("dropped")[-1]["reason"] == "closer-not-allowed"

        github_api.answer("GET", PERMISSION, Reply(502, {"message": "bad gateway"}))
        async with served(valkey_url, closing, resolvers=resolvers) as receiver:
            assert await receiver.github("issues", closed(40, edition=3), "c-3") == (
                503,
                {"error": "permission-lookup-failed"},
            )
            assert receiver.events("github_permission_lookup_failed") == [{"delivery": "c-3", "reason": "status-502"}]

        before = len(github_api.requests)
        async with served(valkey_url, closing, resolvers=resolvers) as receiver:
            assert (await receiver.github("issues", closed(41), "c-6"))[0] == 204
            assert (await receiver.github("issues", closed(40, 999), "c-7"))[0] == 204
            assert (await receiver.github("issues", labeled() | {"label": {"name": "bug"}}, "c-9"))[0] == 204
        assert len(github_api.requests) == before  # a delivery no rule would fire for asks GitHub nothing

        async with served(valkey_url, closing, resolvers=Resolvers(github=None)) as receiver:  # no resolver wired
            assert await receiver.github("issues", closed(40, edition=8), "c-8") == (
                503,
                {"error": "permission-lookup-failed"},
            )
    finally:
        await forge_client.close()


async def test_two_deliveries_in_the_window_answer_queued_then_deduplicated(valkey_url: str, fresh: None) -> None:
    async with served(valkey_url, RULES) as receiver:
        assert await receiver.github("issues", labeled(), "w-1") == (202, {"status": "queued"})
        assert await receiver.github("issues", labeled(), "w-1") == (202, {"status": "queued"})  # a redelivery
        assert await receiver.github("issues", labeled(edition=2), "w-2") == (202, {"status": "deduplicated"})
        assert receiver.events("deduplicated") == [
            {
                "delivery": "w-2",
                "repo": "octo/repo",
                "target": "issue#42",
                "flow": "frontend-fix",
                "jobId": "gh-w-2",
                "survivingJobId": "gh-w-1",
            }
        ]
    assert list(await queued_jobs(valkey_url)) == ["gh-w-1"]


MAXIMAL = {
    "packages": False,
    "image": "pi-job:2",
    "resume": False,
    "skillsDir": "/srv/skills",
    "secrets": {"DEPLOY_TOKEN": "ref"},
    "secretsProfile": "prod",
    "backend": "local",
    "excludeTools": ["bash"],
    "provider": "openai",
    "model": "gpt-5.4",
    "maxTurns": 9,
    "models": ["openai/gpt-5.4"],
    "maxCostUsd": "2.50",
}
MODEL_FIELDS = {"provider", "model", "maxTurns", "models", "maxCostUsd"}


async def test_every_execution_field_reaches_the_stored_job_and_none_the_trigger(valkey_url: str, fresh: None) -> None:
    flow_rule = {
        "on": LABEL["on"],
        "run": {"kind": "github", "flow": "fix", "instructions": "be brief", "replicas": 2} | MAXIMAL,
    }
    command_rule = {
        "on": COMMENT["on"],
        "run": {"kind": "github", "command": "deploy", "waitFor": [{"profile": "ci"}]} | MAXIMAL,
    }
    async with served(valkey_url, rules_of(flow_rule, command_rule)) as receiver:
        assert (await receiver.github("issues", labeled(), "f-1"))[0] == 202
        assert (await receiver.github("issue_comment", commented("@pi"), "f-2"))[0] == 202
    jobs = await queued_jobs(valkey_url)
    flow_job, command_job = jobs["gh-f-1-r1"][1], jobs["gh-f-2"][1]
    for key, value in MAXIMAL.items():
        assert flow_job[key] == value and command_job[key] == value, key
    assert flow_job["instructions"] == "be brief" and flow_job["replicas"] == 2
    assert command_job["command"] == "deploy" and "flow" not in command_job
    assert command_job["waitFor"] == [{"profile": "ci"}]
    for job in (flow_job, command_job):
        assert not (MODEL_FIELDS | set(MAXIMAL) | {"waitFor", "command", "replicas"}) & set(job["trigger"])


async def test_hostile_requests_are_answered_never_crash(valkey_url: str, fresh: None) -> None:
    async with served(valkey_url, RULES) as receiver:
        headers = github_headers(b"{}", "issues", "h-1")
        answers = {
            "get": (await receiver.post("/", b"", headers, method="GET"))[0],
            "text/plain": (await receiver.post("/", b"{}", headers | {"Content-Type": "text/plain"}))[0],
            "no type": (await receiver.post("/", b"{}", {k: v for k, v in headers.items() if k != "Content-Type"}))[0],
            "charset": (await receiver.post("/", b"{}", headers | {"Content-Type": "Application/JSON; charset=utf-8"}))[
                0
            ],
            "no signature": (await receiver.post("/", b"{}", {**headers, "X-Hub-Signature-256": ""}))[0],
            "no delivery": (await receiver.post("/", b"{}", {**headers, "X-GitHub-Delivery": ""}))[0],
            "empty signed": (await receiver.post("/", b"", github_headers(b"", "issues", "h-2")))[0],
        }
        assert answers == {
            "get": 405,
            "text/plain": 415,
            "no type": 415,
            "charset": 204,
            "no signature": 401,
            "no delivery": 400,
            "empty signed": 400,  # the reference's 500 would let anyone raise 5xx alerts
        }
        deep = b"[" * 100_000 + b"]" * 100_000
        assert (await receiver.github("issues", deep, "h-3"))[0] == 400
        assert (await receiver.github("issues", {"issue": None, "sender": "x", "action": ["labeled"]}, "h-4"))[0] == 204
        assert (await receiver.github("issues", "\ud800 not utf-8".encode("utf-8", "surrogatepass"), "h-5"))[0] == 401
        big = b'{"x":"' + b"a" * (2 * 1024 * 1024) + b'"}'
        status, body, reply = await receiver.post("/", big, github_headers(big, "issues", "h-6"))
        assert (status, body) == (413, {"error": "payload too large"}) and reply.get("Connection") == "close"
        exact = b'{"pad":"' + b"a" * (2 * 1024 * 1024 - 10) + b'"}'
        assert len(exact) == 2 * 1024 * 1024
        assert (await receiver.github("issues", exact, "h-7"))[0] == 204  # the limit is inclusive

        async def chunked() -> AsyncIterator[bytes]:
            for _ in range(40):
                yield b"a" * 65_536

        async with receiver.session.post(
            receiver.url, data=chunked(), headers=github_headers(b"", "issues", "h-8")
        ) as r:
            assert r.status == 413
        _, writer = await asyncio.open_connection("127.0.0.1", int(receiver.url.rsplit(":", 1)[1]))
        head = github_headers(b"{}", "issues", "h-9") | {"Content-Length": "500"}
        writer.write(b"POST / HTTP/1.1\r\nHost: x\r\n" + "".join(f"{k}: {v}\r\n" for k, v in head.items()).encode())
        writer.write(b'\r\n{"truncated":')
        await writer.drain()
        writer.close()  # the client goes away mid-body
        await asyncio.sleep(0.2)
        assert (await receiver.github("issues", labeled(), "h-10"))[0] == 202  # and the receiver still serves
        # an empty signed body is the sender's fault (400): no internal error is logged, none of these is one
        assert receiver.errors.events == []
    assert list(await queued_jobs(valkey_url)) == ["gh-h-10"]
