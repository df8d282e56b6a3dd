"""Who may see and act from the console, over real HTTP against a real store: a login by token (hashed in the
settings), a session cookie that scripts cannot read and other sites cannot send, a CSRF token on every action and a
`Sec-Fetch-Site` check, roles read and operate, and each action confirmed, done, and written to the trail."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from aiohttp.test_utils import TestClient, TestServer

from pi_dispatch.config.console_settings import Login, parse_logins
from pi_dispatch.fleet.trail import read_trail
from pi_dispatch.infra.store import StoreAddress
from pi_dispatch.web.app import console_app
from pi_dispatch.web.auth import SESSION_COOKIE, Access

pytestmark = [pytest.mark.redis]
TOKENS = {"alice": "alice-token-of-some-length", "bob": "bob-token-of-some-length"}


def logins() -> tuple[Login, ...]:
    text = ",".join(
        f"{name}:{role}:{hashlib.sha256(TOKENS[name].encode()).hexdigest()}"
        for name, role in (("alice", "operate"), ("bob", "read"))
    )
    return parse_logins(text)


@pytest.fixture
async def browser(valkey_url: str) -> AsyncIterator[TestClient[Any, Any]]:
    store = StoreAddress(valkey_url)
    access = Access(logins(), actions=True, tls=False)
    async with TestClient(TestServer(console_app(store.client(), store, access))) as http:
        yield http


async def log_in(http: TestClient[Any, Any], name: str) -> str:
    answer = await http.post("/login", data={"token": TOKENS[name]}, allow_redirects=False)
    assert answer.status == 302 and answer.headers["Location"] == "/runs"
    cookie = answer.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Secure" not in cookie
    page = await (await http.get("/runs")).text()
    assert f"{name} (" in page
    return page.split('name="csrf" value="')[1].split('"')[0]


async def test_every_page_asks_for_a_login_and_a_wrong_token_is_refused(browser: TestClient[Any, Any]) -> None:
    answer = await browser.get("/runs", allow_redirects=False)
    assert answer.status == 302 and answer.headers["Location"] == "/login"
    assert (await browser.get("/jobs/x/log", allow_redirects=False)).status == 302
    refused = await browser.post("/login", data={"token": "not-a-token"}, allow_redirects=False)
    assert refused.status == 401 and SESSION_COOKIE not in refused.cookies
    assert (await browser.get("/static/console.css")).status == 200  # the login page's own files


async def test_a_reader_sees_no_button_and_is_refused_an_action(
    browser: TestClient[Any, Any], client: aioredis.Redis
) -> None:
    csrf = await log_in(browser, "bob")
    page = await (await browser.get("/jobs/gh-1")).text()
    assert 'id="cancel"' not in page and 'id="retry"' not in page
    refused = await browser.post("/act/cancel/gh-1", data={"csrf": csrf, "confirm": "yes"})
    assert refused.status == 403 and await read_trail(client, 5) == []


async def test_an_action_needs_the_form_token_and_the_consoles_own_page(
    browser: TestClient[Any, Any], client: aioredis.Redis
) -> None:
    csrf = await log_in(browser, "alice")
    assert (await browser.post("/act/cancel/gh-1", data={"confirm": "yes"})).status == 403  # no token
    assert (await browser.post("/act/cancel/gh-1", data={"csrf": "stale", "confirm": "yes"})).status == 403
    hostile = await browser.post("/act/cancel/gh-1", data={"csrf": "é\u202e" * 50, "confirm": "yes"})
    assert hostile.status == 403  # refused, never a 500
    cross = await browser.post(
        "/act/cancel/gh-1", data={"csrf": csrf, "confirm": "yes"}, headers={"Sec-Fetch-Site": "same-site"}
    )
    assert cross.status == 403  # a form on another port of this host is same-site, not same-origin
    assert await read_trail(client, 5) == []
    asked = await browser.post("/act/cancel/gh-1", data={"csrf": csrf})
    assert asked.status == 200 and 'id="confirm"' in await asked.text()  # asked first
    done = await browser.post("/act/cancel/gh-1", data={"csrf": csrf, "confirm": "yes"})
    assert done.status == 200 and 'id="outcome">missing<' in await done.text()
    drained = await browser.post("/act/drain/mini9", data={"csrf": csrf, "confirm": "yes"})
    assert drained.status == 200
    trail = await read_trail(client, 5)
    assert [(action.who, action.via, action.what, action.target, action.outcome) for action in trail] == [
        ("alice", "console", "drain", "mini9", "recorded"), ("alice", "console", "cancel", "gh-1", "missing"),
    ]  # fmt: skip
    assert (await browser.post("/act/drain/not%20a%20name", data={"csrf": csrf, "confirm": "yes"})).status == 400


async def test_logging_out_ends_the_session(browser: TestClient[Any, Any]) -> None:
    csrf = await log_in(browser, "alice")
    out = await browser.post("/logout", data={"csrf": csrf}, allow_redirects=False)
    assert out.status == 302 and out.headers["Location"] == "/login"
    assert (await browser.get("/runs", allow_redirects=False)).status == 302


async def test_an_operator_retries_the_failed_of_a_window_after_confirming(
    browser: TestClient[Any, Any], client: aioredis.Redis, valkey_url: str
) -> None:
    from pi_dispatch.fleet.enqueue import forge_job_options
    from pi_dispatch.fleet.steer import cancel_job, queues_for
    from pi_dispatch.infra.clock import wall_ms
    from pi_dispatch.testing.jobs import forge_job
    from tests.support.workers import open_queues

    async with open_queues(valkey_url, ["pi-jobs"]) as queues:
        for number in (1, 2):
            data = forge_job(number)
            options = {k: v for k, v in forge_job_options("github", data).items() if k != "deduplication"}
            job_id = str((await queues["pi-jobs"].add("github", data, options)).id)
            await cancel_job(client, job_id, await queues_for(client, job_id), now=wall_ms, wait_s=1)
    csrf = await log_in(browser, "alice")
    assert 'id="retry-failed"' in await (await browser.get("/runs", params={"since": "2h"})).text()
    asked = await browser.post("/act/retry-failed/%2A", data={"csrf": csrf, "since": "2h"})
    assert asked.status == 200 and "since 2h" in await asked.text() and await client.llen("bull:pi-jobs:wait") == 0
    assert (await browser.post("/act/retry-failed/%2A", data={"csrf": csrf, "since": "yesterday"})).status == 400
    assert (await browser.post("/act/retry-failed/not%20a%20host", data={"csrf": csrf})).status == 400
    done = await browser.post("/act/retry-failed/%2A", data={"csrf": csrf, "since": "2h", "confirm": "yes"})
    assert done.status == 200 and 'id="outcome">2 of 2 queued<' in await done.text()
    assert await client.llen("bull:pi-jobs:wait") == 2
    trail = await read_trail(client, 5)
    assert [(action.what, action.outcome) for action in trail] == [("retry", "queued"), ("retry", "queued")]
    bob = await log_in(browser, "bob")
    refused = await browser.post("/act/retry-failed/%2A", data={"csrf": bob, "confirm": "yes"})
    assert refused.status == 403


async def test_guessing_tokens_is_refused_unchecked_after_ten_failures_a_minute(browser: TestClient[Any, Any]) -> None:
    from pi_dispatch.web.auth import LOGIN_FAILURES_MAX

    for _ in range(LOGIN_FAILURES_MAX):
        assert (await browser.post("/login", data={"token": "a guess"})).status == 401
    slowed = await browser.post("/login", data={"token": TOKENS["alice"]}, allow_redirects=False)
    assert slowed.status == 429 and 0 < int(slowed.headers["Retry-After"]) <= 60  # even a right one, not checked
    assert "try again in" in await slowed.text()


@pytest.fixture
async def behind_proxy(valkey_url: str) -> AsyncIterator[TestClient[Any, Any]]:
    """The console behind a proxy on 127.0.0.1 (whose X-Forwarded-For names the client), answering console.example."""
    store = StoreAddress(valkey_url)
    access = Access(logins(), actions=True, tls=False, hosts=frozenset({"console.example"}), trusted_proxy="127.0.0.1")
    async with TestClient(TestServer(console_app(store.client(), store, access))) as http:
        yield http


async def test_one_address_guessing_does_not_lock_the_operators_out(behind_proxy: TestClient[Any, Any]) -> None:
    """Issue 53 (L2): ten bad tokens a minute from one client slow that client alone; an operator elsewhere logs
    in. The client is the address the declared proxy forwarded last, never one a client put before it."""
    from pi_dispatch.web.auth import LOGIN_FAILURES_MAX

    attacker = {"X-Forwarded-For": "203.0.113.66"}
    for _ in range(LOGIN_FAILURES_MAX):
        assert (await behind_proxy.post("/login", data={"token": "a guess"}, headers=attacker)).status == 401
    slowed = await behind_proxy.post("/login", data={"token": "a guess"}, headers=attacker)
    assert slowed.status == 429
    spoofed = {"X-Forwarded-For": "198.51.100.1, 203.0.113.66"}  # the proxy appends the real one last
    assert (await behind_proxy.post("/login", data={"token": "a guess"}, headers=spoofed)).status == 429
    operator = {"X-Forwarded-For": "198.51.100.7"}
    answer = await behind_proxy.post("/login", data={"token": TOKENS["alice"]}, headers=operator, allow_redirects=False)
    assert answer.status == 302


async def test_a_name_the_console_does_not_answer_to_is_refused_421(behind_proxy: TestClient[Any, Any]) -> None:
    """Issue 53 (M4): a page of another site whose name resolves here (DNS rebinding) sends its own name as Host."""
    for host in ("attacker.example", "attacker.example:10480", "console.example.attacker.example", "bad host:x"):
        answer = await behind_proxy.get("/login", headers={"Host": host}, allow_redirects=False)
        assert answer.status == 421, host
        assert answer.headers["X-Frame-Options"] == "DENY"
    for host in ("console.example", "CONSOLE.example:443", "localhost:10480", "127.0.0.1", "[::1]:10480", "10.1.2.3"):
        assert (await behind_proxy.get("/login", headers={"Host": host})).status == 200, host


async def test_confirming_acts_on_the_exact_job_id(browser: TestClient[Any, Any], client: aioredis.Redis) -> None:
    """Issue 53 (L3): the confirmation posts to the job id whole; `X?y`, `X#y` and `a%2Fb` were confirmed on `X`
    or `a/b`."""
    csrf = await log_in(browser, "alice")
    for job_id in ("X?y", "X#y", "a%2Fb", "a/b"):
        from urllib.parse import quote

        asked = await browser.post(f"/act/cancel/{quote(job_id, safe='')}", data={"csrf": csrf})
        assert asked.status == 200
        form = (await asked.text()).split('<form action="/act/')[1].split('"')[0]
        form = "/act/" + form
        assert form == f"/act/cancel/{quote(job_id, safe='')}", (job_id, form)
        done = await browser.post(form.replace("&amp;", "&"), data={"csrf": csrf, "confirm": "yes"})
        assert done.status == 200
    trail = await read_trail(client, 10)
    assert sorted(action.target for action in trail) == sorted(["X?y", "X#y", "a%2Fb", "a/b"])
