"""GitLab, Forgejo and Azure DevOps end to end over real HTTP, real redis-server and BullMQ, each forge's API a
local stand-in asked for every delivery's authority (receiver-contract §15.6)."""

from __future__ import annotations

import base64
import functools
import json
from pathlib import Path
from typing import Any

import pytest

from pi_dispatch.fleet.enqueue import Enqueued, Enqueuer, ForgeRouter
from pi_dispatch.forgeapi.http import ForgeClient
from pi_dispatch.infra.store import StoreAddress
from pi_dispatch.receiver.auth import hub_signature
from pi_dispatch.receiver.forges.azure.access import AzureArm, AzureVerifier, azure_membership
from pi_dispatch.receiver.forges.forgejo.access import ForgejoArm, forgejo_permission
from pi_dispatch.receiver.forges.gitlab.access import GitLabArm, GitLabVerifier, gitlab_access
from tests.receiver.test_server import no_hosts
from tests.support.fakeforge import FakeForge, Reply
from tests.support.receiving import GITHUB_SECRET, Identities, Resolvers, queued_jobs, rules_of, served

pytestmark = pytest.mark.redis
TOKEN = "a-shared-secret"
MEMBER = "/api/v4/projects/42/members/all/7"


@pytest.fixture(autouse=True)
async def fresh(client: Any) -> None:
    """Each test on a flushed database (the `client` fixture flushes it)."""


def gitlab_issue(iid: int = 5, kind: str = "issue", user: int = 7) -> dict[str, Any]:
    return {
        "object_kind": kind,
        "user": {"id": user, "username": "alice-username"},
        "project": {"id": 42, "path_with_namespace": "group/sub/proj"},
        "object_attributes": {"iid": iid, "title": "T", "description": "D", "action": "update"},
        "changes": {"labels": {"previous": [], "current": [{"title": "pi:frontend"}]}},
    }


GITLAB_RULES = rules_of(
    {"on": {"type": "label", "any": ["pi:frontend"]}, "run": {"kind": "gitlab", "flow": "frontend-fix"}},
    {
        "on": {"type": "pull_request", "action": ["update"], "any": ["pi:frontend"]},
        "run": {"kind": "gitlab", "flow": "frontend-fix"},
    },
)


def gitlab_headers(delivery: str | None = "wh-1", token: str = TOKEN, **extra: str) -> dict[str, str]:
    found = {"Content-Type": "application/json", "X-Gitlab-Event": "Issue Hook", "X-Gitlab-Token": token}
    return found | ({"webhook-id": delivery} if delivery else {}) | extra


async def test_gitlab(valkey_url: str, forge: FakeForge, forge_client: ForgeClient) -> None:
    arm = GitLabArm(GitLabVerifier.build("token", TOKEN), "api-token", forge.url)
    resolvers = Resolvers(gitlab=functools.partial(gitlab_access, arm, forge_client))
    forge.answer("GET", MEMBER, Reply(200, {"access_level": 30}))
    async with served(valkey_url, GITLAB_RULES, gitlab=arm.verifier, resolvers=resolvers) as receiver:
        for _ in range(2):  # a replay is the same job id: BullMQ keeps the one job
            assert (await receiver.post("/gitlab", gitlab_issue(), gitlab_headers()))[:2] == (202, {"status": "queued"})
        assert [entry["delivery"] for entry in receiver.events("enqueued")] == ["wh-1", "wh-1"]
        jobs = await queued_jobs(valkey_url)
        name, data, opts = jobs["gl-wh-1"]
        assert name == "gitlab" and data["repo"] == "group/sub/proj" and data["projectId"] == 42
        assert opts["deduplication"]["id"] == "group/sub/proj#5:frontend-fix"
        assert forge.asked(MEMBER)[0].headers["private-token"] == "api-token"
        mr = gitlab_issue(5, "merge_request")
        assert (await receiver.post("/gitlab", mr, gitlab_headers("wh-mr")))[0] == 202
        assert (await queued_jobs(valkey_url))["gl-wh-mr"][2]["deduplication"]["id"] == "group/sub/proj!5:frontend-fix"
        for path in ("/gitlab?x=1", "/gitlab/"):
            assert (await receiver.post(path, gitlab_issue(9), gitlab_headers(f"wh-{path[-1]}")))[0] == 202
        asked = len(forge.requests)
        assert (await receiver.post("/gitlab", gitlab_issue(), gitlab_headers(token="forged")))[:2] == (
            401,
            {"error": "invalid token"},
        )
        assert len(forge.requests) == asked  # a forged delivery asks GitLab nothing
        status, body, _ = await receiver.post("/gitlab", gitlab_issue(), gitlab_headers(None))
        assert status == 400 and body["error"] == "missing delivery id" and "17.4" in body["detail"]
        idem = gitlab_headers(None) | {"Idempotency-Key": "idem-1"}
        assert (await receiver.post("/gitlab", gitlab_issue(11), idem))[0] == 202
        assert "gl-idem-1" in await queued_jobs(valkey_url)
        assert (await receiver.post("/", gitlab_issue(), gitlab_headers()))[0] == 401  # `/` is GitHub's
        forge.answer("GET", MEMBER, Reply(200, {"access_level": 20}))
        assert (await receiver.post("/gitlab", gitlab_issue(12), gitlab_headers("wh-2")))[0] == 204
        assert receiver.events("dropped")[-1] == {"delivery": "wh-2", "reason": "author-not-allowed"}
        forge.answer("GET", MEMBER, Reply(500, {"message": "boom"}))
        assert (await receiver.post("/gitlab", gitlab_issue(13), gitlab_headers("wh-3")))[:2] == (
            503,
            {"error": "access-lookup-failed"},
        )
        assert receiver.events("gitlab_access_lookup_failed") == [
            {"delivery": "wh-3", "reason": "members lookup returned 500"}
        ]
        assert "alice-username" not in json.dumps(receiver.log.events)
    async with served(valkey_url, GITLAB_RULES) as receiver:
        assert (await receiver.post("/gitlab", gitlab_issue(), gitlab_headers()))[:2] == (
            404,
            {"error": "gitlab webhooks are not configured"},
        )


class AnsweringAnother(Enqueuer):
    """A real enqueuer that reports what BullMQ reports when the dedup window kept another job."""

    async def enqueue_forge_job(self, kind: str, job: Any) -> Enqueued:
        placed = await super().enqueue_forge_job(kind, job)
        return Enqueued(placed.queue, placed.job_id, "gl-earlier")


async def test_gitlab_replicas_and_the_dedup_answer(
    valkey_url: str, forge: FakeForge, forge_client: ForgeClient
) -> None:
    arm = GitLabArm(GitLabVerifier.build("token", TOKEN), "api-token", forge.url)
    resolvers = Resolvers(gitlab=functools.partial(gitlab_access, arm, forge_client))
    forge.answer("GET", MEMBER, Reply(200, {"access_level": 40}))
    wide = rules_of(
        {"on": {"type": "label", "any": ["pi:frontend"]}, "run": {"kind": "gitlab", "flow": "fix", "replicas": 2}}
    )
    async with served(valkey_url, wide, gitlab=arm.verifier, resolvers=resolvers) as receiver:
        assert (await receiver.post("/gitlab", gitlab_issue(), gitlab_headers()))[0] == 202
    jobs = await queued_jobs(valkey_url)
    assert {key: jobs[key][2]["deduplication"]["id"] for key in jobs} == {
        "gl-wh-1-r1": "group/sub/proj#5:fix:r1",
        "gl-wh-1-r2": "group/sub/proj#5:fix:r2",
    }
    other = AnsweringAnother(StoreAddress(valkey_url), ForgeRouter(no_hosts))
    async with served(valkey_url, GITLAB_RULES, gitlab=arm.verifier, resolvers=resolvers, enqueuer=other) as receiver:
        assert (await receiver.post("/gitlab", gitlab_issue(), gitlab_headers("wh-9")))[:2] == (
            202,
            {"status": "deduplicated"},
        )
        assert [entry["survivingJobId"] for entry in receiver.events("deduplicated")] == ["gl-earlier"]
        assert receiver.events("enqueued") == []


FORGEJO_SECRET = "forgejo-secret"
PERMISSION = "/api/v1/repos/acme/widgets/collaborators/alice/permission"


def forgejo_delivery() -> dict[str, Any]:
    return {
        "action": "label_updated",
        "sender": {"id": 7, "login": "alice"},
        "issue": {"number": 3, "title": "T", "body": "B", "labels": [{"name": "pi:go"}]},
        "repository": {"full_name": "acme/widgets"},
    }


def forgejo_headers(body: bytes, secret: str = FORGEJO_SECRET, delivery: str = "fj-guid-1") -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "X-GitHub-Event": "issues",
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": hub_signature(secret.encode(), body),
    }


async def test_forgejo(valkey_url: str, forge: FakeForge, forge_client: ForgeClient) -> None:
    arm = ForgejoArm(FORGEJO_SECRET.encode(), "tok", forge.url, None)
    resolvers = Resolvers(forgejo=functools.partial(forgejo_permission, arm, forge_client))
    rules = rules_of({"on": {"type": "label", "any": ["pi:go"]}, "run": {"kind": "forgejo", "flow": "fix"}})
    body = json.dumps(forgejo_delivery()).encode()
    forge.answer("GET", PERMISSION, Reply(200, {"permission": "write"}))
    async with served(valkey_url, rules, forgejo_secret=FORGEJO_SECRET, resolvers=resolvers) as receiver:
        assert (await receiver.post("/forgejo", body, forgejo_headers(body)))[:2] == (202, {"status": "queued"})
        name, data, _ = (await queued_jobs(valkey_url))["fj-fj-guid-1"]
        assert name == "forgejo" and data["trigger"]["action"] == "label_updated"
        assert forge.asked(PERMISSION)[0].headers["authorization"] == "token tok"
        assert (await receiver.post("/forgejo", body, forgejo_headers(body, "wrong")))[0] == 401
        assert (await receiver.post("/forgejo", body, forgejo_headers(body, GITHUB_SECRET)))[0] == 401
        assert (await receiver.post("/", body, forgejo_headers(body)))[0] == 401  # GitHub's secret differs
        forge.answer("GET", PERMISSION, Reply(200, {"permission": "read"}))
        # another delivery is another body (the same one under a new id would be a replay: test_server.py)
        body = json.dumps(forgejo_delivery() | {"number": 4}).encode()
        assert (await receiver.post("/forgejo", body, forgejo_headers(body, delivery="g2")))[0] == 204
        assert receiver.events("dropped")[-1]["reason"] == "author-not-allowed"
        forge.answer("GET", PERMISSION, Reply(403, {"message": "forbidden"}))
        body = json.dumps(forgejo_delivery() | {"number": 5}).encode()
        assert (await receiver.post("/forgejo", body, forgejo_headers(body, delivery="g3")))[:2] == (
            503,
            {"error": "permission-lookup-failed"},
        )
        assert "alice" not in json.dumps(receiver.log.events)
    async with served(valkey_url, rules) as receiver:
        assert (await receiver.post("/forgejo", body, forgejo_headers(body)))[:2] == (
            404,
            {"error": "forgejo webhooks are not configured"},
        )


AZURE_SECRET = base64.b64encode(b"hooks:s3cret").decode()
GRAPH = {
    "/_apis/graph/descriptors/dev-guid?api-version=7.1-preview.1": Reply(200, {"value": "aad.dev"}),
    "/_apis/graph/descriptors/proj-guid?api-version=7.1-preview.1": Reply(200, {"value": "scp.proj"}),
    "/_apis/graph/memberships/aad.dev?direction=up&api-version=7.1-preview.1": Reply(
        200, {"value": [{"containerDescriptor": "vssgp.other"}, {"containerDescriptor": "scp.proj"}]}
    ),
}


def work_item(delivery: str | None = "delivery-guid-1") -> dict[str, Any]:
    body: dict[str, Any] = {
        "eventType": "workitem.created",
        "resourceContainers": {"project": {"id": "proj-guid"}},
        "resource": {
            "id": 7,
            "createdBy": {"id": "dev-guid"},
            "fields": {"System.TeamProject": "Fabrikam", "System.Title": "T", "System.Tags": "pi:go"},
        },
    }
    return body | ({"id": delivery} if delivery else {})


async def test_azure(valkey_url: str, forge: FakeForge, forge_client: ForgeClient) -> None:
    for path, reply in GRAPH.items():
        forge.answer("GET", path, reply)
    arm = AzureArm(AzureVerifier("basic", AZURE_SECRET), "pat", forge.url)
    resolvers = Resolvers(azure=functools.partial(azure_membership, arm, forge_client))
    rules = rules_of(
        {"on": {"type": "label", "any": ["pi:go"]}, "run": {"kind": "azure", "flow": "fix", "repository": "widgets"}}
    )
    basic = {"Content-Type": "application/json", "Authorization": f"Basic {AZURE_SECRET}"}
    identities = Identities(azure={"id": "self-guid"})
    async with served(valkey_url, rules, azure=arm.verifier, resolvers=resolvers, identities=identities) as receiver:
        assert (await receiver.post("/azure", work_item(), basic))[:2] == (202, {"status": "queued"})
        name, data, opts = (await queued_jobs(valkey_url))["az-delivery-guid-1"]
        assert name == "azure" and data["repo"] == "Fabrikam/widgets"
        assert opts["deduplication"]["id"] == "Fabrikam/widgets#7:fix"
        assert (
            forge.asked("/_apis/graph/memberships")[0].headers["authorization"]
            == "Basic " + base64.b64encode(b":pat").decode()
        )
        assert (await receiver.post("/azure", work_item(), basic | {"Authorization": "Basic eA=="}))[:2] == (
            401,
            {"error": "unauthorized"},
        )
        assert (
            await receiver.post(
                "/azure", work_item(), {"Content-Type": "application/json", "X-Pi-Secret": AZURE_SECRET}
            )
        )[0] == 401
        assert (await receiver.post("/azure", work_item(None), basic))[:2] == (400, {"error": "missing-delivery-id"})
        assert (await receiver.post("/azure", b"", basic, method="GET"))[:2] == (405, {"error": "method-not-allowed"})
        form = basic | {"Content-Type": "application/x-www-form-urlencoded"}
        assert (await receiver.post("/azure", b"a=b", form))[:2] == (415, {"error": "unsupported-media-type"})
        forge.answer("GET", "/_apis/graph/memberships/aad.dev?direction=up&api-version=7.1-preview.1", Reply(503, {}))
        assert (await receiver.post("/azure", work_item("delivery-guid-2"), basic))[:2] == (
            503,
            {"error": "membership-lookup-failed"},
        )
        assert receiver.events("azure_membership_lookup_failed") == [
            {"delivery": "delivery-guid-2", "reason": "azure lookup returned 503"}
        ]
    header_mode = AzureVerifier("header", "s3cret", "X-Pi-Secret")
    async with served(valkey_url, rules, azure=header_mode, resolvers=resolvers, identities=identities) as receiver:
        header = {"Content-Type": "application/json", "x-pi-secret": "s3cret"}
        assert (await receiver.post("/azure", work_item("delivery-guid-3"), header))[0] in (202, 503)
        assert (
            await receiver.post(
                "/azure", work_item(), {"Content-Type": "application/json", "Authorization": "Basic s3cret"}
            )
        )[0] == 401
    async with served(valkey_url, rules) as receiver:
        assert (await receiver.post("/azure", work_item(), basic))[:2] == (
            404,
            {"error": "azure webhooks are not configured"},
        )


async def test_declared_oversize_is_refused_before_reading(valkey_url: str, client: Any) -> None:
    import asyncio

    rules = rules_of(
        {"on": {"type": "label", "any": ["pi:go"]}, "run": {"kind": "azure", "flow": "fix", "repository": "w"}}
    )
    gitlab = GitLabVerifier.build("token", TOKEN)
    async with served(valkey_url, rules, azure=AzureVerifier("basic", AZURE_SECRET), gitlab=gitlab) as receiver:
        port = int(receiver.url.rsplit(":", 1)[1])
        for path, size, word in (
            ("/azure", 3 * 1024 * 1024, "payload-too-large"),
            ("/gitlab", 5 * 1024 * 1024, "payload too large"),
        ):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            extra = "X-Gitlab-Event: Issue Hook\r\nwebhook-id: wh-big\r\n" if path == "/gitlab" else ""
            writer.write(
                f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{extra}"
                f"Content-Length: {size}\r\n\r\n".encode()
            )
            await writer.drain()
            head = await asyncio.wait_for(reader.read(4096), 5)
            assert head.startswith(b"HTTP/1.1 413") and word.encode() in head, head
            writer.close()


EXAMPLES = Path(__file__).parent.parent.parent / "data" / "webhooks"


async def test_deliveries_shaped_like_the_forges_published_examples(
    valkey_url: str, forge: FakeForge, forge_client: ForgeClient
) -> None:
    def rule(kind: str, **run: str) -> dict[str, Any]:
        return {"on": {"type": "label", "any": ["pi:fix"]}, "run": {"kind": kind, "flow": "fix", **run}}

    rules = rules_of(rule("github"), rule("gitlab"), rule("forgejo"), rule("azure", repository="fabrikam-app"))
    forge.answer("GET", "/api/v4/projects/1/members/all/1", Reply(200, {"access_level": 40}))
    forge.answer(
        "GET", "/api/v1/repos/acme/widgets/collaborators/alice/permission", Reply(200, {"permission": "write"})
    )
    version = "api-version=7.1-preview.1"
    forge.answer(
        "GET",
        f"/_apis/graph/users?subjectTypes=aad,msa&{version}",
        Reply(200, {"value": [{"principalName": "fabrikamfiber4@hotmail.com", "descriptor": "msa.jamal"}]}),
    )
    forge.answer(
        "GET",
        f"/_apis/graph/descriptors/be9b3917-87e6-42a4-a549-2bc06a7a878f?{version}",
        Reply(200, {"value": "scp.fc"}),
    )
    forge.answer(
        "GET",
        f"/_apis/graph/memberships/msa.jamal?direction=up&{version}",
        Reply(200, {"value": [{"containerDescriptor": "scp.fc"}]}),
    )
    gitlab = GitLabArm(GitLabVerifier.build("token", TOKEN), "api-token", forge.url)
    forgejo = ForgejoArm(FORGEJO_SECRET.encode(), "tok", forge.url, None)
    azure = AzureArm(AzureVerifier("basic", AZURE_SECRET), "pat", forge.url)
    resolvers = Resolvers(
        gitlab=functools.partial(gitlab_access, gitlab, forge_client),
        forgejo=functools.partial(forgejo_permission, forgejo, forge_client),
        azure=functools.partial(azure_membership, azure, forge_client),
    )
    identities = Identities(github=999, gitlab=999, forgejo=999, azure={"id": "self-guid"})
    options = {"forgejo_secret": FORGEJO_SECRET, "gitlab": gitlab.verifier, "azure": azure.verifier}
    async with served(valkey_url, rules, resolvers=resolvers, identities=identities, **options) as receiver:
        github = (EXAMPLES / "github-issues-labeled.json").read_bytes()
        assert (await receiver.github("issues", github, "72d3162e-cc78-11e3-81ab-4c9367dc0958"))[0] == 202
        gitlab_body = (EXAMPLES / "gitlab-issue-hook.json").read_bytes()
        assert (await receiver.post("/gitlab", gitlab_body, gitlab_headers("wh-example")))[0] == 202
        forgejo_body = (EXAMPLES / "forgejo-issue-label-updated.json").read_bytes()
        assert (await receiver.post("/forgejo", forgejo_body, forgejo_headers(forgejo_body, delivery="fj-example")))[
            0
        ] == 202
        azure_body = (EXAMPLES / "azure-workitem-updated.json").read_bytes()
        basic = {"Content-Type": "application/json", "Authorization": f"Basic {AZURE_SECRET}"}
        assert (await receiver.post("/azure", azure_body, basic))[0] == 202
        logs = json.dumps(receiver.log.events)
    jobs = await queued_jobs(valkey_url)
    assert jobs["gh-72d3162e-cc78-11e3-81ab-4c9367dc0958"][1]["target"]["title"] == "Spelling error in the README file"
    assert (
        jobs["gl-wh-example"][1]["repo"] == "gitlabhq/gitlab-test"
        and jobs["gl-wh-example"][1]["target"]["number"] == 23
    )
    assert jobs["fj-fj-example"][1]["target"] == {
        "type": "issue",
        "number": 3,
        "title": "The widget rattles",
        "body": "Steps to reproduce: shake it.",
    }
    azure_job = jobs["az-27646e0e-b520-4d2b-9411-bba7524947cd"][1]
    assert azure_job["repo"] == "FabrikamCloud/fabrikam-app" and azure_job["target"]["number"] == 5
    assert azure_job["trigger"]["sender"]["id"].startswith("azid-")
    for private in ("fabrikamfiber4", "admin@example.com", "alice@noreply", "Administrator", "root"):
        assert private not in logs and all(private not in json.dumps(job[1]["trigger"]) for job in jobs.values())


async def test_a_replayed_gitlab_signature_is_refused(
    valkey_url: str, forge: FakeForge, forge_client: ForgeClient
) -> None:
    import os
    import time

    from tests.support.receiving import gitlab_signature_headers

    key = os.urandom(32)
    verifier = GitLabVerifier.build("signature", "whsec_" + base64.b64encode(key).decode())
    arm = GitLabArm(verifier, "api-token", forge.url)
    forge.answer("GET", MEMBER, Reply(200, {"access_level": 30}))
    resolvers = Resolvers(gitlab=functools.partial(gitlab_access, arm, forge_client))
    body = json.dumps(gitlab_issue()).encode()
    signed = {"Content-Type": "application/json", "X-Gitlab-Event": "Issue Hook"} | gitlab_signature_headers(
        body, key, "wh-sig"
    )
    async with served(valkey_url, GITLAB_RULES, gitlab=verifier, resolvers=resolvers) as receiver:
        assert (await receiver.post("/gitlab", body, signed))[0] == 202
        receiver.receiver.clock = lambda: time.time() + 600  # the same request, replayed ten minutes later
        assert (await receiver.post("/gitlab", body, signed))[:2] == (401, {"error": "stale or invalid timestamp"})
        forged = signed | {"X-Gitlab-Token": TOKEN}
        assert (await receiver.post("/gitlab", body + b" ", forged))[0] == 401
