"""Shared fixtures: a real redis-server for the session, a flushed client per test, the seed's modules."""

from __future__ import annotations

import fcntl
import gc
import hashlib
import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis as syncredis
import redis.asyncio as aioredis
from hypothesis import settings

from pi_dispatch.infra.valkey import connect
from pi_dispatch.testing.services import RedisServer

# A pytest-xdist worker starts with COLUMNS=80 and LINES=24 in its environment. rich reads both once, when a Console is
# made (the CLI's, at import), and would then print every in-process command 80 columns wide, where a run without
# xdist follows the COLUMNS each call sets. Nothing of ours asks for them.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)

# Speed is measured by bench/, never asserted by a test: no per-example deadline on a slow machine.
settings.register_profile("pi-dispatch", deadline=None, print_blob=True)
settings.load_profile("pi-dispatch")

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("SHARED_DIR", REPO.parent / "shared"))
SEED_DIFF = SHARED / "seed" / "pi-dispatch-1.7.0-to-1.8.0.diff"
# What the tests' node scripts import: the reference's clients, and undici for a Node older than 22.21 behind a proxy
NODE_PACKAGES = ("ioredis@5", "bullmq@6", "undici@7")


@pytest.fixture(autouse=True)
def _leaks_found_where_they_are_made() -> Iterator[None]:
    """A collection after each test: a connection or socket a test leaves open is then found (an unraisable
    ResourceWarning, an error here) in that test's own teardown, not in whichever later test the collector happens
    to run in."""
    yield
    gc.collect()


@pytest.fixture(scope="session")
def suite_valkey_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The suite's Valkey: TEST_VALKEY_URL when given, else a redis-server started for this session."""
    given = os.environ.get("TEST_VALKEY_URL")
    if given:
        yield given
        return
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def valkey_url(suite_valkey_url: str) -> str:
    """The suite's Valkey, flushed for this test: a job, row or window an earlier test left would otherwise be taken
    by this test's worker or counted by its reader (a leftover job once became the last job a status line named)."""
    with syncredis.Redis.from_url(suite_valkey_url, socket_timeout=10) as connection:
        connection.flushdb()
    return suite_valkey_url


@pytest.fixture
async def client(valkey_url: str) -> AsyncIterator[aioredis.Redis]:
    """A bounded client on the suite's store, flushed by valkey_url."""
    connection = connect(valkey_url)
    try:
        yield connection
    finally:
        await connection.aclose()


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of this test's own, for tests that kill it."""
    server = RedisServer(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def forge() -> AsyncIterator[Any]:
    """A local stand-in for the forges' HTTP APIs on a port of its own (tests/fakeforge.py)."""
    from tests.support.fakeforge import FakeForge

    stand_in = await FakeForge().start()
    try:
        yield stand_in
    finally:
        await stand_in.stop()


@pytest.fixture
async def forge_client() -> AsyncIterator[Any]:
    """The receiver's own client for forge APIs, with a short timeout."""
    from pi_dispatch.forgeapi.http import ForgeClient

    made = ForgeClient(timeout_s=2)
    try:
        yield made
    finally:
        await made.close()


@pytest.fixture
async def queue(valkey_url: str, client: aioredis.Redis) -> AsyncIterator[Any]:
    """The shared queue, pi-jobs, on the suite's redis-server (flushed: `client`); closed after the test."""
    from bullmq import Queue

    opened = Queue("pi-jobs", {"connection": valkey_url})
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture(scope="session")
def docker_client() -> Iterator[Any]:
    """The machine's Docker daemon; `./dev test` installs and starts it."""
    import docker

    try:
        daemon = docker.from_env()
        daemon.ping()
    except Exception as error:
        pytest.fail(f"no Docker daemon answers ({type(error).__name__}); `./dev test` installs and starts one")
    try:
        yield daemon
    finally:
        daemon.close()


@pytest.fixture(scope="session")
def job_image(docker_client: Any) -> str:
    """The example job image, built locally once per session."""
    from pi_dispatch.demo.jobimage import EXAMPLE_IMAGE, build_example_image

    build_example_image(docker_client)
    return EXAMPLE_IMAGE


@pytest.fixture(scope="session")
def probe_image(docker_client: Any) -> str:
    """The probe job image (`testing/probeimage.py`), built locally once per session."""
    from pi_dispatch.testing.probeimage import build_probe_image

    return build_probe_image(docker_client)


@pytest.fixture(scope="session")
def squid_binary() -> str:
    """Debian's squid, the egress proxy; `./dev test` installs it."""
    found = shutil.which("squid") or shutil.which("squid", path="/usr/sbin")
    if found is None:
        pytest.fail("no squid: `./dev test` installs Debian's (apt-get install squid)")
    return found


@pytest.fixture(scope="session")
def gvisor(docker_client: Any) -> str:
    """gVisor's runsc, registered with the Docker daemon as the runsc runtime; `./dev test` installs and registers
    it."""
    from pi_dispatch.core.runtimes import RUNSC

    if RUNSC not in (docker_client.info().get("Runtimes") or {}):
        pytest.fail(
            "no runsc runtime in Docker: `./dev test` installs gVisor's and registers it (apt-get install runsc)"
        )
    return RUNSC


@pytest.fixture(scope="session")
def seed_diff() -> Path:
    if not SEED_DIFF.is_file():
        pytest.fail(f"the reference change is missing at {SEED_DIFF}; set SHARED_DIR to the shared/ folder")
    return SEED_DIFF


@pytest.fixture(scope="session")
def node_modules() -> Path:
    """NODE_PACKAGES installed once per machine and shared by every test process (an npm install took 10-90 s a
    time under CI's load): a folder under the user's cache named by what it holds, made whole under a lock, then
    renamed into place, so a process never sees half an install."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.fail("node and npm are needed: `./dev test` installs them (apt-get install nodejs npm)")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pi-dispatch-tests"
    cache.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(" ".join(NODE_PACKAGES).encode()).hexdigest()[:12]
    done = cache / f"node-{digest}"
    with (cache / "node.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (done / "node_modules").is_dir():
            partial = cache / f"node-{digest}.partial"
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir()
            installed = subprocess.run(
                [npm, "install", "--no-audit", "--no-fund", "--silent", "--prefix", str(partial), *NODE_PACKAGES],
                capture_output=True, text=True, timeout=600, check=False,
            )  # fmt: skip
            if installed.returncode != 0:
                pytest.fail(f"npm install {' '.join(NODE_PACKAGES)} failed: {installed.stderr[-2000:]}")
            partial.rename(done)
    return done / "node_modules"


# A real service's fixtures, by the marker a test that uses them must carry.
SERVICE_FIXTURES = {
    "redis": {"valkey_url", "client", "private_redis", "queue"},
    "docker": {"docker_client", "job_image", "probe_image"},
    "node": {"seed_diff", "node_modules"},
    "squid": {"squid_binary"},
    "gvisor": {"gvisor"},
    "browser": {"chromium"},
}


CHROMIUM_FLAGS = (  # headless, and nothing of its own on a closed network: no background fetches to refuse
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-sync",
    "--disable-background-networking", "--disable-component-update", "--window-size=1280,900",
)  # fmt: skip


@pytest.fixture
def chromium(tmp_path: Path) -> Iterator[Any]:
    """Debian's Chromium, driven by Selenium through Debian's chromedriver (`./dev test` installs both)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    if not (Path("/usr/bin/chromium").exists() and Path("/usr/bin/chromedriver").exists()):
        pytest.fail(
            "no /usr/bin/chromium and /usr/bin/chromedriver: `./dev test` installs chromium and chromium-driver"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuse a test that uses a real service's fixture without its marker, so `-m "not docker"` stays honest."""
    unmarked = []
    for item in items:
        marks = {mark.name for mark in item.iter_markers()}
        fixtures = set(getattr(item, "fixturenames", ()))
        unmarked += [
            f"{item.nodeid} uses {', '.join(sorted(used & fixtures))} without @pytest.mark.{marker}"
            for marker, used in SERVICE_FIXTURES.items()
            if used & fixtures and marker not in marks
        ]
    if unmarked:
        raise pytest.UsageError("\n".join(unmarked))
