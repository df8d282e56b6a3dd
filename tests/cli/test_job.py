"""`logs` and `job` against a real redis-server: the store's copy read and paged, and where a host keeps its own."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from pi_dispatch.core.names import record_stem
from pi_dispatch.fleet.jobhistory import CHUNK_BYTES, JobHistory
from tests.support.helpers import run_cli

pytestmark = [pytest.mark.redis]


async def test_logs_prints_an_attempts_stored_output_and_its_end(client: aioredis.Redis, valkey_url: str) -> None:
    history = JobHistory(client, 60_000)
    stem = record_stem("gh-out-1")
    await history.started(stem, 1, {"host": "mini1", "at": "t0", "store": "on"})
    for number in range(1_200):  # more entries than one read takes: paged
        await history.output(stem, 1, f"2027-01-01T00:00:00Z line {number}\n".encode())
    await history.output(stem, 1, b"x" * (CHUNK_BYTES + 10) + b"\n")  # split into entries of at most CHUNK_BYTES
    await history.ended(stem, 1, {"at": "t1", "bytes": "99", "dropped": "7"})
    done = await asyncio.to_thread(run_cli, "logs", "gh-out-1", "--valkey-url", valkey_url)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].endswith("line 0") and lines[1199].endswith("line 1199") and len(lines[1200]) == CHUNK_BYTES + 10
    assert "ended at t1" in done.stderr and "7 bytes past the store's cap" in done.stderr
    tail = await asyncio.to_thread(run_cli, "logs", "gh-out-1", "--tail", "2", "--valkey-url", valkey_url)
    assert tail.stdout.splitlines()[0].endswith("line 1199") and len(tail.stdout.splitlines()) == 2


async def test_logs_names_the_host_that_keeps_its_own_and_says_when_there_is_none(
    client: aioredis.Redis, valkey_url: str, tmp_path: Path
) -> None:
    history = JobHistory(client, 60_000)
    await history.started(record_stem("gh-own-1"), 1, {"host": "mini3", "at": "t0", "store": "off"})
    kept = await asyncio.to_thread(run_cli, "logs", "gh-own-1", "--valkey-url", valkey_url, "--logs-dir", str(tmp_path))
    assert (
        kept.returncode == 1
        and "ran on mini3" in kept.stderr
        and "pi-dispatch logs gh-own-1 --attempt 1" in kept.stderr
    )
    (tmp_path / "gh-own-1.log").write_bytes(b"#pi-dispatch attempt=1 host=mini3\n2027 here on mini3\n")
    local = await asyncio.to_thread(
        run_cli, "logs", "gh-own-1", "--valkey-url", valkey_url, "--logs-dir", str(tmp_path)
    )
    assert local.returncode == 0 and local.stdout == "2027 here on mini3\n"  # on that host, its own file
    none = await asyncio.to_thread(
        run_cli, "logs", "gh-node-1", "--valkey-url", valkey_url, "--logs-dir", str(tmp_path)
    )
    assert none.returncode == 1 and "a Node worker's jobs have none" in none.stderr


def test_an_unreachable_store_is_one_line_and_exit_1() -> None:
    done = run_cli("job", "gh-1", "--valkey-url", "redis://127.0.0.1:1")
    assert done.returncode == 1 and "Valkey could not be read" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
async def test_a_follower_stops_when_the_attempt_ended_without_its_end_entry(
    client: aioredis.Redis, valkey_url: str
) -> None:
    history = JobHistory(client, 60_000)
    stem = record_stem("gh-cut-1")
    await history.started(stem, 1, {"host": "mini1", "at": "t0", "store": "on"})
    await history.output(stem, 1, b"2027 before the worker died\n")
    await history.remember({"jobId": "gh-cut-1", "outcome": "failed", "reason": "job-stalled"}, stem)
    done = await asyncio.to_thread(run_cli, "logs", "gh-cut-1", "-f", "--valkey-url", valkey_url)
    assert done.returncode == 0 and "before the worker died" in done.stdout
    assert "its worker stopped first" in done.stderr
