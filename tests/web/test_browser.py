"""The web console in a real browser (Debian's Chromium, driven by Selenium) against a real store, worker and Docker:
find a job with the search box, watch a line its container prints appear in the page, and a hostile `<script>` in
its output shown as text and never run. Each page's screenshot is saved under the test's folder."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from aiohttp import web
from bullmq import Queue

from pi_dispatch.infra.store import StoreAddress
from pi_dispatch.testing.jobs import forge_job
from pi_dispatch.web.app import console_app
from tests.support.workers import CEILING_S, finished_job, running_worker, settings_of, worker_env

pytestmark = [pytest.mark.redis, pytest.mark.browser]
HOSTILE = "<script>window.pwned = 1</script><img src=x onerror=window.pwned=2>"


@pytest.fixture
async def console_url(valkey_url: str) -> AsyncIterator[str]:
    store = StoreAddress(valkey_url)
    runner = web.AppRunner(console_app(store.client(), store), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]  # the port the OS chose
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def until(condition: Callable[[], bool], what: str) -> None:
    """Ask the browser (off the loop the console serves on) until it says yes; the ceiling is only a hang's."""
    deadline = time.monotonic() + CEILING_S
    while not await asyncio.to_thread(condition):
        assert time.monotonic() < deadline, f"not seen in the page: {what}"
        await asyncio.sleep(0.1)


async def shoot(chromium: Any, folder: Path, name: str) -> None:
    await asyncio.to_thread(chromium.save_screenshot, str(folder / f"console-{name}.png"))


@pytest.mark.docker
@pytest.mark.slow
async def test_a_job_found_by_id_shows_its_containers_lines_live_and_hostile_output_as_text(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis, job_image: str, queue: Queue, chromium: Any,
    console_url: str,
) -> None:  # fmt: skip
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    env = worker_env(tmp_path, valkey_url, job_image, "mini1", PI_CONCURRENCY="1")
    async with running_worker(settings_of(env)):
        trigger = {"demoSay": HOSTILE, "demoTicks": 4}
        await queue.add("github", forge_job(1, trigger=trigger), {"jobId": "gh-watched", "attempts": 1})
        await asyncio.to_thread(chromium.get, f"{console_url}/runs")
        search = await asyncio.to_thread(chromium.find_element, By.NAME, "q")
        await asyncio.to_thread(search.send_keys, "gh-watched", Keys.ENTER)
        await until(lambda: chromium.current_url.endswith("/jobs/gh-watched"), "the job's page")
        deadline = time.monotonic() + CEILING_S
        while not await asyncio.to_thread(chromium.find_elements, By.ID, "log"):  # found before its container ran
            assert time.monotonic() < deadline, "the job's output never showed"
            await asyncio.sleep(0.3)
            await asyncio.to_thread(chromium.refresh)
        log = await asyncio.to_thread(chromium.find_element, By.ID, "log")
        await until(lambda: "tick 1" in log.text, "a line its container printed")
        running = await asyncio.to_thread(lambda: "tick 4" not in log.text)
        await shoot(chromium, tmp_path, "job")
        await finished_job(queue, "gh-watched")
        await until(lambda: "tick 4" in log.text, "the last line")
    assert running  # the first line was there while the container still ran
    assert HOSTILE in await asyncio.to_thread(lambda: log.text)  # shown as the text it is
    assert await asyncio.to_thread(chromium.execute_script, "return window.pwned") is None  # and never run
    assert await asyncio.to_thread(lambda: log.find_elements(By.TAG_NAME, "script")) == []
    await until(lambda: "ended" in chromium.find_element(By.ID, "log-state").text, "the attempt's end")


async def test_every_page_renders_in_the_browser_with_no_script_error(
    tmp_path: Path, client: aioredis.Redis, chromium: Any, console_url: str
) -> None:
    for page in ("runs", "fleet", "limits", "jobs/nope"):
        await asyncio.to_thread(chromium.get, f"{console_url}/{page}")
        await shoot(chromium, tmp_path, page.replace("/", "-"))
        logged = await asyncio.to_thread(chromium.get_log, "browser")
        errors = [entry for entry in logged if entry.get("level") == "SEVERE" and "/jobs/nope" not in entry["message"]]
        assert errors == [], (page, errors)  # the CSP lets the page's own scripts run, and they run cleanly
        assert await asyncio.to_thread(chromium.execute_script, "return typeof window.htmx") == "object"
