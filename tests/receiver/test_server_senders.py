"""Who may start a job and a delivery sent again, over real HTTP against real redis-server and BullMQ (issue 53): the
sender's permission asked of the stand-in GitHub API for every delivery that would start a job, and a signed body
under a new delivery id or another event name starting nothing."""

from __future__ import annotations

import json

import pytest

from tests.receiver.test_server import (
    RULES,
    commented,
    fresh,
    github_api,
    labeled,
    permission_resolvers,
    pull_request,
)
from tests.support.fakeforge import FakeForge, Reply
from tests.support.receiving import queued_jobs, served

pytestmark = pytest.mark.redis
__all__ = ["fresh", "github_api"]  # fixtures this module's tests ask for, by name


SENDER_PERMISSION = "/repos/octo/repo/collaborators/alice-login/permission"


async def test_every_delivery_that_would_start_a_job_asks_github_about_its_sender(
    valkey_url: str, fresh: None, github_api: FakeForge
) -> None:
    """Issue 53: an outsider (read access) who reopens their own labelled issue, a read-only COLLABORATOR's comment
    and an organisation MEMBER's pull request start nothing; the same deliveries from a writer do. A burst from one
    sender asks GitHub once a minute."""
    resolvers, forge_client = permission_resolvers(github_api)
    reopened = labeled(43) | {"action": "reopened"}
    del reopened["label"]
    deliveries = [
        ("issues", reopened),
        ("issue_comment", commented("@pi", "COLLABORATOR")),
        ("pull_request", pull_request("opened", "MEMBER")),
    ]
    try:
        github_api.answer("GET", SENDER_PERMISSION, Reply(200, {"permission": "read"}))
        async with served(valkey_url, RULES, resolvers=resolvers) as receiver:
            for number, (event, body) in enumerate(deliveries):
                assert (await receiver.github(event, body, f"o-{number}"))[0] == 204
            reasons = [fields["reason"] for fields in receiver.events("dropped")]
        assert reasons == ["sender-not-allowed", "author-not-allowed", "pr-author-not-allowed"]
        assert len(github_api.asked(SENDER_PERMISSION)) == 3
        assert await queued_jobs(valkey_url) == {}

        github_api.answer("GET", SENDER_PERMISSION, Reply(200, {"permission": "write"}))
        async with served(valkey_url, RULES, resolvers=resolvers, authority_kept_s=60.0) as receiver:
            for number, (event, body) in enumerate(deliveries):  # another delivery each, not a body sent again
                assert (await receiver.github(event, body | {"edition": 1}, f"w-{number}"))[0] == 202
        assert set(await queued_jobs(valkey_url)) == {"gh-w-0", "gh-w-1", "gh-w-2"}
        assert len(github_api.asked(SENDER_PERMISSION)) == 4  # the three deliveries of one sender asked once
    finally:
        await forge_client.close()


async def test_a_signed_body_sent_again_under_a_new_delivery_id_starts_nothing(valkey_url: str, fresh: None) -> None:
    """Issue 53 (L5): GitHub signs the body, not the delivery id: a captured delivery sent again with another id,
    after its job has gone, is answered as deduplicated and starts nothing; GitHub's own redelivery of the same
    id (after a 503) is served as before. Another event name for the body is refused by its shape."""
    from pi_dispatch.core.keys import bull_key

    async with served(valkey_url, RULES) as receiver:
        assert await receiver.github("issues", labeled(), "first-id") == (202, {"status": "queued"})
        await receiver.receiver.enqueuer.queues["pi-jobs"].remove("gh-first-id")  # its run over: the job is gone
        assert await receiver.github("issues", labeled(), "captured-id") == (202, {"status": "deduplicated"})
        assert receiver.events("delivery_replayed") == [{"forge": "github", "delivery": "captured-id"}]
        assert await receiver.github("issues", labeled(), "first-id") == (202, {"status": "queued"})  # a redelivery
        other = labeled(43) | {"comment": {"body": "@pi", "author_association": "OWNER"}}
        assert (await receiver.github("issues", other, "shaped-id"))[0] == 204
        assert receiver.events("dropped")[-1] == {"delivery": "shaped-id", "reason": "event-shape-mismatch"}
    jobs = await queued_jobs(valkey_url)
    assert set(jobs) == {"gh-first-id"} and "captured" not in json.dumps(jobs)
    assert await fresh_client_keys(valkey_url, bull_key("pi-jobs", "*captured*")) == []


async def fresh_client_keys(valkey_url: str, pattern: str) -> list[bytes]:
    from pi_dispatch.infra.valkey import connect

    store = connect(valkey_url)
    try:
        return [key async for key in store.scan_iter(match=pattern)]
    finally:
        await store.aclose()
