"""The web console's pages and live output against a real redis-server, over real HTTP (aiohttp's test server):
what each page answers, that hostile text stays text, that every answer carries the security headers, and that a
job's output streams from its start and resumes after the last event a browser had."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from aiohttp.test_utils import TestClient, TestServer

from pi_dispatch.core.names import record_stem
from pi_dispatch.fleet.jobhistory import JobHistory
from pi_dispatch.infra.store import StoreAddress
from pi_dispatch.web.app import SECURITY_HEADERS, console_app

pytestmark = [pytest.mark.redis]
HOSTILE = "<script>alert(1)</script>"


@pytest.fixture
async def browser(valkey_url: str) -> AsyncIterator[TestClient[Any, Any]]:
    store = StoreAddress(valkey_url)
    async with TestClient(TestServer(console_app(store.client(), store))) as http:
        yield http


def events(body: str) -> list[dict[str, str]]:
    found = []
    for block in body.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line and not line.startswith(":"))
        if "event" in fields:
            found.append(fields)
    return found


async def test_each_page_answers_with_the_security_headers(browser: TestClient[Any, Any]) -> None:
    for path, status in (("/runs", 200), ("/fleet", 200), ("/limits", 200), ("/jobs/nope", 404), ("/", 302),
                         ("/static/htmx.min.js", 200), ("/static/..%2Fapp.py", 404), ("/nowhere", 404)):  # fmt: skip
        answer = await browser.get(path, allow_redirects=False)
        assert answer.status == status, path
        for name, value in SECURITY_HEADERS.items():
            if name != "Cache-Control" or not path.startswith("/static/"):
                assert answer.headers.get(name) == value, (path, name)


async def test_the_search_box_goes_to_the_job_and_hostile_ids_stay_text(browser: TestClient[Any, Any]) -> None:
    answer = await browser.get("/runs", params={"q": HOSTILE}, allow_redirects=False)
    assert answer.status == 302 and answer.headers["Location"] == "/jobs/%3Cscript%3Ealert(1)%3C%2Fscript%3E"
    page = await (await browser.get(answer.headers["Location"])).text()
    assert HOSTILE not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


async def test_a_filter_that_does_not_read_is_said_not_thrown(browser: TestClient[Any, Any]) -> None:
    answer = await browser.get("/runs", params={"since": "last tuesday"})
    assert answer.status == 400 and "--since" in await answer.text() and "Traceback" not in await answer.text()


async def test_runs_are_listed_filtered_and_linked(browser: TestClient[Any, Any], client: aioredis.Redis) -> None:
    from pi_dispatch.fleet.mirror import RunMirror

    writer = RunMirror(client, 31)
    for index, outcome in enumerate(("completed", "failed")):
        record = {"jobId": f"gh-{index}", "kind": "github", "target": "acme/web#1", "flow": "triage",
                  "startedAt": "2026-12-06T01:00:00.000Z", "endedAt": f"2026-12-06T01:0{index}:00.000Z",
                  "outcome": outcome, "reason": None, "exitCode": 0, "attempt": 0, "host": "mini1"}  # fmt: skip
        assert await writer.mirror(record, record_stem(record["jobId"]))
    every = await (await browser.get("/runs")).text()
    assert 'href="/jobs/gh-0"' in every and 'href="/jobs/gh-1"' in every
    failed = await (await browser.get("/runs", params={"outcome": "failed"})).text()
    assert 'href="/jobs/gh-1"' in failed and 'href="/jobs/gh-0"' not in failed


async def test_a_jobs_output_streams_from_its_start_and_resumes_after_the_last_event(
    browser: TestClient[Any, Any], client: aioredis.Redis
) -> None:
    history, stem = JobHistory(client, 60_000), record_stem("gh-live")
    await history.started(stem, 1, {"host": "mini1", "at": "2026-12-06T01:00:00.000Z"})
    await history.output(stem, 1, f"line one\n{HOSTILE}\n\x1b[31mred\x1b[0m\n".encode())
    await history.ended(stem, 1, {"exitCode": "0"})
    page = await (await browser.get("/jobs/gh-live")).text()
    assert 'data-source="/jobs/gh-live/log?attempt=1"' in page
    answer = await browser.get("/jobs/gh-live/log")
    assert answer.headers["Content-Type"] == "text/event-stream"
    said = events(await answer.text())
    assert [event["event"] for event in said] == ["start", "text", "end"]
    assert json.loads(said[1]["data"])["text"] == f"line one\n{HOSTILE}\nred\n"  # sent as data, colours dropped
    resumed = events(await (await browser.get("/jobs/gh-live/log", headers={"Last-Event-ID": said[1]["id"]})).text())
    assert [event["event"] for event in resumed] == ["end"]
    missing = await browser.get("/jobs/never-ran/log")
    assert missing.status == 404
    assert 'href="/jobs/gh-live/output?attempt=1"' in page
    whole = await browser.get("/jobs/gh-live/output", params={"attempt": "1"})
    assert whole.headers["Content-Type"] == "text/plain; charset=utf-8"  # never markup, and nosniff says so
    assert await whole.read() == f"line one\n{HOSTILE}\n\x1b[31mred\x1b[0m\n".encode()
    for streamed in (answer, whole):  # issue 53 (L4): a streamed answer carries the headers too
        assert streamed.headers["Content-Security-Policy"].startswith("default-src 'none'")
        assert streamed.headers["X-Content-Type-Options"] == "nosniff" and streamed.headers["X-Frame-Options"] == "DENY"


async def test_the_whole_output_is_read_past_a_page_of_entries(
    browser: TestClient[Any, Any], client: aioredis.Redis
) -> None:
    from pi_dispatch.web.live import PAGE

    history, stem = JobHistory(client, 60_000), record_stem("gh-long")
    await history.started(stem, 1, {"host": "mini1"})
    for index in range(PAGE + 3):
        await history.output(stem, 1, f"{index}\n".encode())
    whole = await (await browser.get("/jobs/gh-long/output")).text()  # still running: what is there so far
    assert whole.splitlines() == [str(index) for index in range(PAGE + 3)]


async def test_a_job_page_groups_every_hosts_route_answer(browser: TestClient[Any, Any], valkey_url: str) -> None:
    from bullmq import Queue

    from pi_dispatch.core.keys import SHARED_QUEUE
    from pi_dispatch.fleet.registry import HostRegistry
    from pi_dispatch.web.reads import NAMES_SHOWN

    client = aioredis.from_url(valkey_url)
    lacking = [HostRegistry(client, f"plain{index:02d}") for index in range(NAMES_SHOWN + 5)]
    for row in [*lacking, HostRegistry(client, "prodhost")]:
        caps = "" if row in lacking else "s:prod"
        await row.start({"concurrency": "1", "caps": caps, "routes": "true"}, keep_beating=False)
    queue = Queue(SHARED_QUEUE, {"connection": valkey_url})
    await queue.add("fix", {"repo": "acme/web", "secretsProfile": "prod"}, {"jobId": "gh-routed"})
    await queue.close()
    try:
        page = await (await browser.get("/jobs/gh-routed")).text()
        rows = page.split('<table class="route">')[1].split("</table>")[0].split("<tr")[2:]
        assert len(rows) == 2 and 'class="chosen"' in rows[0] and "prodhost" in rows[0], rows
        assert f"<td>{NAMES_SHOWN + 5}</td>" in rows[1] and "and 5 more" in rows[1] and "?hosts=all" in page
        every = await (await browser.get("/jobs/gh-routed", params={"hosts": "all"})).text()
        assert all(f"plain{index:02d}" in every for index in range(NAMES_SHOWN + 5)) and "more</td>" not in every
    finally:
        await client.aclose()


async def test_the_fleet_page_shows_thousands_of_hosts_a_page_at_a_time(
    browser: TestClient[Any, Any], client: aioredis.Redis
) -> None:
    from pi_dispatch.fleet.registry import HostRegistry
    from pi_dispatch.web.reads import PAGE_SIZE

    for index in range(PAGE_SIZE + 5):
        await HostRegistry(client, f"w{index:04d}").start({"concurrency": "1"}, keep_beating=False)

    def named(page: str) -> list[str]:
        table = page.split('<table class="hosts">')[1].split("</table>", maxsplit=1)[0]
        return [row.split("<td>")[1].split("</td>")[0] for row in table.split("<tr>")[2:]]

    first = await (await browser.get("/fleet")).text()
    assert named(first) == [f"w{index:04d}" for index in range(PAGE_SIZE)] and "page 1 of 2" in first
    second = await (await browser.get("/fleet", params={"page": "2"})).text()
    assert named(second) == [f"w{index:04d}" for index in range(PAGE_SIZE, PAGE_SIZE + 5)]
    assert named(await (await browser.get("/fleet", params={"page": "99"})).text()) == named(second)  # the last
    assert named(await (await browser.get("/fleet", params={"page": "²"})).text()) == named(first)  # not a number
    found = await (await browser.get("/fleet", params={"host": "w010"})).text()
    assert named(found) == ["w0100", "w0101", "w0102", "w0103", "w0104"] and "5 of 105 live hosts" in found


@pytest.mark.slow
async def test_the_audit_page_shows_what_audit_live_finds_in_the_inventory(valkey_url: str) -> None:
    from pathlib import Path

    from pi_dispatch.core.errors import ExitStatus
    from tests.support.helpers import run_cli_process

    inventory = Path(__file__).resolve().parents[2] / "inventory.example"
    store = StoreAddress(valkey_url)
    async with TestClient(TestServer(console_app(store.client(), store, inventory=inventory))) as http:
        answer = await http.get("/audit")
        page = await answer.text()
    said = run_cli_process("audit", "--inventory", str(inventory), "--live", "--json", "--valkey-url", valkey_url)
    assert said.returncode in (ExitStatus.OK, ExitStatus.FAILURE), said.stderr
    codes = {finding["code"] for finding in json.loads(said.stdout)["findings"]}
    assert answer.status == 200 and codes and all(f"<code>{code}</code>" in page for code in codes)
    assert "registry: ok" in page  # it read the live registry, through the store handed to it


async def test_without_an_inventory_the_audit_page_says_how_to_name_one(browser: TestClient[Any, Any]) -> None:
    answer = await browser.get("/audit")
    assert answer.status == 503 and "PI_CONSOLE_INVENTORY" in await answer.text()


async def test_a_number_that_is_not_ascii_reads_as_none_never_a_500(browser: TestClient[Any, Any]) -> None:
    for query in ({"attempt": "²"}, {"attempt": "٣"}, {"attempt": "9" * 40}):  # str.isdigit() passes the first two
        assert (await browser.get("/jobs/gh-x/log", params=query)).status == 404, query  # no output of it
