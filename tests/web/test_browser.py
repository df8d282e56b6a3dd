"""The web console in a real browser (Debian's Chromium, driven by Selenium) against a real store, worker and Docker:
find a job with the search box, watch a line its container prints appear in the page, and a hostile `<script>` in
its output shown as text and never run. Each page's screenshot is saved in build/screenshots, the run's artifacts."""

from __future__ import annotations

import asyncio
import contextlib
import socket
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
from pi_dispatch.web.auth import Access
from tests.support.workers import CEILING_S, finished_job, running_worker, settings_of, worker_env
from tests.web.test_access import TOKENS, logins

pytestmark = [pytest.mark.redis, pytest.mark.browser]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "build" / "screenshots"  # the run's artifacts (not committed)
HOSTILE = "<script>window.pwned = 1</script><img src=x onerror=window.pwned=2>"


@contextlib.asynccontextmanager
async def serving(valkey_url: str, access: Access | None = None) -> AsyncIterator[str]:
    """The console on a port of its own, its URL."""
    store = StoreAddress(valkey_url)
    runner = web.AppRunner(console_app(store.client(), store, access), access_log=None)
    await runner.setup()
    with socket.socket() as probe:  # a free port: bound, then released for the console to take
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@pytest.fixture
async def console_url(valkey_url: str) -> AsyncIterator[str]:
    async with serving(valkey_url) as url:
        yield url


async def until(condition: Callable[[], bool], what: str) -> None:
    """Ask the browser (off the loop the console serves on) until it says yes; the ceiling is only a hang's."""
    deadline = time.monotonic() + CEILING_S
    while not await asyncio.to_thread(condition):
        assert time.monotonic() < deadline, f"not seen in the page: {what}"
        await asyncio.sleep(0.1)


async def shoot(chromium: Any, name: str) -> None:
    """The page as the browser shows it, kept as the run's artifact (docs/images has the copies the docs show)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    assert await asyncio.to_thread(chromium.save_screenshot, str(SCREENSHOTS / f"console-{name}.png"))


async def log_in(chromium: Any, url: str, name: str) -> None:
    """Log in as one of test_access's logins, from the login page a page asked for sends the browser to."""
    from selenium.webdriver.common.by import By

    await asyncio.to_thread(chromium.get, f"{url}/runs")
    await until(lambda: chromium.current_url.endswith("/login"), "the login page")
    field = await asyncio.to_thread(chromium.find_element, By.NAME, "token")
    await asyncio.to_thread(field.send_keys, TOKENS[name])
    await asyncio.to_thread(field.submit)
    await until(lambda: f"{name} (" in chromium.page_source, "the login's name")


async def confirmed(chromium: Any, by: str, button: str, shot: str = "") -> None:
    """Press an action's button, then its confirmation's (its page saved as `shot`, if named), until the outcome."""
    from selenium.webdriver.common.by import By

    await asyncio.to_thread(chromium.find_element(by, button).click)
    await until(lambda: bool(chromium.find_elements(By.ID, "confirm")), "the confirmation")
    if shot:
        await shoot(chromium, shot)
    await asyncio.to_thread(chromium.find_element(By.ID, "confirm").click)
    await until(lambda: bool(chromium.find_elements(By.ID, "outcome")), "the outcome")


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
        await shoot(chromium, "job")
        await finished_job(queue, "gh-watched")
        await until(lambda: "tick 4" in log.text, "the last line")
    assert running  # the first line was there while the container still ran
    assert HOSTILE in await asyncio.to_thread(lambda: log.text)  # shown as the text it is
    assert await asyncio.to_thread(chromium.execute_script, "return window.pwned") is None  # and never run
    assert await asyncio.to_thread(lambda: log.find_elements(By.TAG_NAME, "script")) == []
    await until(lambda: "ended" in chromium.find_element(By.ID, "log-state").text, "the attempt's end")
    for page in ("runs", "limits"):  # with the run on record, for the docs
        await asyncio.to_thread(chromium.get, f"{console_url}/{page}")
        await shoot(chromium, page)


async def test_every_page_renders_in_the_browser_with_no_script_error(
    tmp_path: Path, client: aioredis.Redis, chromium: Any, console_url: str
) -> None:
    for page in ("runs", "fleet", "limits", "jobs/nope"):
        await asyncio.to_thread(chromium.get, f"{console_url}/{page}")
        await shoot(chromium, "empty-" + page.replace("/", "-"))
        logged = await asyncio.to_thread(chromium.get_log, "browser")
        errors = [entry for entry in logged if entry.get("level") == "SEVERE" and "/jobs/nope" not in entry["message"]]
        assert errors == [], (page, errors)  # the CSP lets the page's own scripts run, and they run cleanly
        assert await asyncio.to_thread(chromium.execute_script, "return typeof window.htmx") == "object"


@pytest.mark.docker
@pytest.mark.slow
async def test_an_operator_cancels_a_running_job_and_its_container_goes_while_a_reader_has_no_button(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis, job_image: str, queue: Queue, chromium: Any,
    docker_client: Any,
) -> None:  # fmt: skip
    from selenium.webdriver.common.by import By

    from pi_dispatch.worker.run.containers import LABEL_JOB

    def containers() -> list[Any]:
        return list(docker_client.containers.list(filters={"label": f"{LABEL_JOB}=gh-cancelled"}))

    env = worker_env(tmp_path, valkey_url, job_image, "mini1", PI_CONCURRENCY="1")
    async with serving(valkey_url, Access(logins(), actions=True, tls=False)) as url, running_worker(settings_of(env)):
        await queue.add("github", forge_job(1, trigger={"demoSleep": 120}), {"jobId": "gh-cancelled", "attempts": 1})
        deadline = time.monotonic() + CEILING_S
        while not await asyncio.to_thread(containers):
            assert time.monotonic() < deadline, "its container never ran"
            await asyncio.sleep(0.2)
        await log_in(chromium, url, "bob")  # a reader: the page has no action
        await asyncio.to_thread(chromium.get, f"{url}/jobs/gh-cancelled")
        assert await asyncio.to_thread(chromium.find_elements, By.ID, "cancel") == []
        await asyncio.to_thread(chromium.find_element(By.CSS_SELECTOR, "form.who button").click)
        await log_in(chromium, url, "alice")  # an operator
        await asyncio.to_thread(chromium.get, f"{url}/jobs/gh-cancelled")
        await confirmed(chromium, By.ID, "cancel", shot="confirm")
        said = await asyncio.to_thread(lambda: chromium.find_element(By.ID, "outcome").text)
        assert said in ("cancelled", "pending"), said
        deadline = time.monotonic() + CEILING_S
        while await asyncio.to_thread(containers):
            assert time.monotonic() < deadline, "its container is still there"
            await asyncio.sleep(0.2)
        job = await finished_job(queue, "gh-cancelled")
    assert job.failedReason and "operator-cancel" in job.failedReason


async def test_an_operator_drains_the_host_a_job_routes_to_and_its_route_moves(
    valkey_url: str, client: aioredis.Redis, chromium: Any
) -> None:
    from selenium.webdriver.common.by import By

    from pi_dispatch.core.keys import SHARED_QUEUE
    from pi_dispatch.fleet.registry import HostRegistry

    async def route() -> str:
        await asyncio.to_thread(chromium.get, f"{url}/jobs/gh-drained")
        return str(await asyncio.to_thread(lambda: chromium.find_element(By.ID, "route").text))

    for name in ("mini1", "mini2", "mini3"):
        await HostRegistry(client, name).start({"concurrency": "1", "caps": "s:prod", "routes": "true"},
                                               keep_beating=False)  # fmt: skip
    await HostRegistry(client, "plain").start({"concurrency": "1", "caps": "", "routes": "true"}, keep_beating=False)
    shared = Queue(SHARED_QUEUE, {"connection": valkey_url})
    await shared.add("github", {"repo": "acme/web", "secretsProfile": "prod"}, {"jobId": "gh-drained"})
    await shared.close()
    async with serving(valkey_url, Access(logins(), actions=True, tls=False)) as url:
        await log_in(chromium, url, "alice")
        before = await route()
        assert before in ("mini1", "mini2", "mini3"), before
        await asyncio.to_thread(chromium.get, f"{url}/fleet")
        await confirmed(chromium, By.CSS_SELECTOR, f"form[action='/act/drain/{before}'] button")
        after = await route()
        await shoot(chromium, "job-routed")
        await asyncio.to_thread(chromium.get, f"{url}/fleet")
        await shoot(chromium, "fleet")
    assert after in ("mini1", "mini2", "mini3") and after != before, (before, after)
