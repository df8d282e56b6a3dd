"""Who the harness is on each forge, resolved at boot with its retry window (receiver-contract §11.5, §15.8)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from pi_dispatch.core.errors import ExitStatus
from pi_dispatch.forgeapi.errors import ForgeCallError
from pi_dispatch.forgeapi.github import GitHubAuth, GitHubTokens
from pi_dispatch.forgeapi.http import Answer, ForgeClient, status_transient
from pi_dispatch.infra.events import Recorder
from pi_dispatch.receiver.forges.azure.access import AzureArm, AzureVerifier, azure_identity
from pi_dispatch.receiver.forges.forgejo.access import ForgejoArm, forgejo_identity
from pi_dispatch.receiver.forges.github.access import github_identity
from pi_dispatch.receiver.forges.gitlab.access import GitLabArm, GitLabVerifier, gitlab_identity
from pi_dispatch.receiver.forges.identity import with_retry
from tests.support.fakeforge import FakeForge, Reply


class FakeTime:
    """A clock that sleeping advances, so the retry schedule is exact and the test takes no time."""

    def __init__(self) -> None:
        self.now_s = 0.0
        self.sleeps: list[int] = []

    def clock(self) -> float:
        return self.now_s

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(round(seconds * 1000))
        self.now_s += seconds


def failing(*errors: BaseException | object) -> Callable[[], Awaitable[object]]:
    answers = list(errors)

    async def attempt() -> object:
        found = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(found, BaseException):
            raise found
        return found

    return attempt


def transient(reason: str, **extra: Any) -> ForgeCallError:
    return ForgeCallError(reason, transient=True, **extra)


async def test_two_transient_failures_then_success() -> None:
    time, log = FakeTime(), Recorder()
    attempt = failing(transient("down 1", status=502, request_id="R1"), transient("down 2"), 999)
    assert await with_retry("github", attempt, 600_000, log, sleep=time.sleep, clock=time.clock) == 999
    assert time.sleeps == [5000, 10000]
    assert [list(fields) for _, fields in log.events] == [
        ["forge", "attempt", "reason", "delayMs", "status", "requestId"]
    ] * 2
    assert log.events[0][1]["status"] == 502 and log.events[0][1]["requestId"] == "R1"
    assert "token" not in str(log.events)


async def test_the_schedule_fills_the_window_exactly() -> None:
    time, log = FakeTime(), Recorder()
    with pytest.raises(ForgeCallError) as raised:
        await with_retry("gitlab", failing(transient("down")), 125_000, log, sleep=time.sleep, clock=time.clock)
    assert time.sleeps == [5000, 10000, 20000, 30000, 30000, 30000]
    assert raised.value.exit_code == ExitStatus.FAILURE
    short, log = FakeTime(), Recorder()
    attempts = failing(transient("down 1"), transient("down 2"), transient("down 3"))
    with pytest.raises(ForgeCallError):
        await with_retry("gitlab", attempts, 12_000, log, sleep=short.sleep, clock=short.clock)
    assert short.sleeps == [5000, 7000]
    assert log.events[-1] == (
        "identity_retry_exhausted",
        {"forge": "gitlab", "attempts": 3, "windowMs": 12_000, "reason": "down 3"},
    )


async def test_a_determinate_refusal_stops_at_once() -> None:
    time, log = FakeTime(), Recorder()
    refused = ForgeCallError("GitLab GET /user returned 401", transient=False, status=401)
    with pytest.raises(ForgeCallError) as raised:
        await with_retry("gitlab", failing(refused), 600_000, log, sleep=time.sleep, clock=time.clock)
    assert raised.value is refused and raised.value.exit_code == ExitStatus.CONFIG
    assert time.sleeps == [] and log.events == []
    later = FakeTime()
    with pytest.raises(ForgeCallError) as raised:
        await with_retry(
            "gitlab",
            failing(transient("a"), transient("b"), refused),
            600_000,
            Recorder(),
            sleep=later.sleep,
            clock=later.clock,
        )
    assert raised.value is refused and later.sleeps == [5000, 10000]


@pytest.mark.parametrize("window", [None, float("nan"), 0, -5, float("inf")])
async def test_windows_that_are_not_windows_are_refused(window: Any) -> None:
    with pytest.raises(ValueError):
        await with_retry("github", failing(1), window, Recorder())


async def test_a_try_that_never_answers_is_cut_off_and_a_synchronous_throw_retried() -> None:
    time = FakeTime()
    calls = []

    async def hangs() -> object:
        calls.append(1)
        if len(calls) == 1:
            await asyncio.sleep(3600)
        return 7

    assert (
        await with_retry("forgejo", hangs, 600_000, Recorder(), sleep=time.sleep, clock=time.clock, cutoff_s=0.05) == 7
    )
    thrown = []

    def sync_throw() -> Awaitable[object]:
        thrown.append(1)
        if len(thrown) == 1:
            raise RuntimeError("boom")
        return asyncio.sleep(0, result=8)

    assert await with_retry("azure", sync_throw, 600_000, Recorder(), sleep=time.sleep, clock=time.clock) == 8


def test_transient_statuses() -> None:
    for status in (0, 500, 502, 408, 425, 429):
        assert status_transient(Answer(status))
    for status in (401, 404, 403, 400):
        assert not status_transient(Answer(status))
    assert status_transient(Answer(403, {"retry-after": "5"}))
    assert status_transient(Answer(403, {"x-ratelimit-remaining": "0"}))


async def test_identities_over_http(forge: FakeForge) -> None:
    client = ForgeClient(timeout_s=2)
    try:
        forge.answer("GET", "/user", Reply(200, {"id": 999, "login": "pi-bot"}))
        tokens = GitHubTokens(GitHubAuth("pat", True, forge.url, token="tok"), client)
        assert await github_identity(tokens) == 999
        assert forge.asked("/user")[0].headers["authorization"] == "Bearer tok"
        forge.answer("GET", "/api/v4/user", Reply(200, {"id": 55}))
        gitlab = GitLabArm(GitLabVerifier.build("token", "t"), "glpat", forge.url)
        assert await gitlab_identity(gitlab, client) == 55
        forge.answer("GET", "/api/v1/user", Reply(403, {}))
        with pytest.raises(ForgeCallError) as raised:
            await forgejo_identity(ForgejoArm(b"s", "tok", forge.url, None), client)
        assert not raised.value.transient and "FORGEJO_BOT_ID" in raised.value.reason
        assert await forgejo_identity(ForgejoArm(b"s", "tok", forge.url, 31), client) == 31
        connection = "/_apis/connectionData?api-version=7.1-preview.1"
        forge.answer(
            "GET",
            connection,
            Reply(
                200,
                {"authenticatedUser": {"id": "self-guid", "properties": {"Account": {"$value": "PI-Bot@Example.com"}}}},
            ),
        )
        own = await azure_identity(AzureArm(AzureVerifier("basic", "x"), "pat", forge.url), client)
        assert own.as_identity() == {"id": "self-guid", "email": "pi-bot@example.com"}
        forge.answer("GET", connection, Reply(200, {"authenticatedUser": {}}))
        with pytest.raises(ForgeCallError) as raised:
            await azure_identity(AzureArm(AzureVerifier("basic", "x"), "pat", forge.url), client)
        assert not raised.value.transient
        forge.answer("GET", "/user", Reply(302, {}, headers={"Location": forge.url + "/elsewhere"}))
        with pytest.raises(ForgeCallError):
            await github_identity(tokens)  # never follows the redirect
        assert forge.asked("/elsewhere") == []
        forge.answer("GET", "/user", Reply(200, raw=b"not json"))
        with pytest.raises(ForgeCallError) as raised:
            await github_identity(tokens)
        assert raised.value.transient
    finally:
        await client.close()
