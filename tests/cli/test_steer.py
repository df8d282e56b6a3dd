"""`cancel`, `retry`, `drain` and `resume` from the command line, against a real redis-server and real BullMQ."""

from __future__ import annotations

import asyncio
import json

import pytest
import redis.asyncio as aioredis

from pi_dispatch.fleet.control import read_drain
from pi_dispatch.fleet.enqueue import forge_job_options
from pi_dispatch.testing.jobs import forge_job
from tests.support.helpers import run_cli
from tests.support.workers import open_queues

pytestmark = [pytest.mark.redis]


async def test_retry_failed_runs_every_cancelled_job_again(client: aioredis.Redis, valkey_url: str) -> None:
    async with open_queues(valkey_url, ["pi-jobs"]) as queues:
        ids = []
        for number in (1, 2):
            data = forge_job(number)
            options = {k: v for k, v in forge_job_options("github", data).items() if k != "deduplication"}
            ids.append(str((await queues["pi-jobs"].add("github", data, options)).id))
    for job_id in ids:
        done = await asyncio.to_thread(run_cli, "cancel", job_id, "--valkey-url", valkey_url)
        assert done.returncode == 0 and f"cancelled {job_id}" in done.stdout
    retried = await asyncio.to_thread(run_cli, "retry", "--failed", "--json", "--valkey-url", valkey_url)
    assert retried.returncode == 0, retried.stderr
    assert json.loads(retried.stdout) == [{"jobId": job_id, "result": "queued", "queue": "pi-jobs"} for job_id in ids]
    assert await client.llen("bull:pi-jobs:wait") == 2


async def test_bad_input_is_one_line_and_exit_2(valkey_url: str) -> None:
    both = await asyncio.to_thread(run_cli, "retry", "gh-1", "--failed", "--valkey-url", valkey_url)
    assert both.returncode == 2 and "not both" in both.stderr and "Traceback" not in both.stderr
    for age in ("yesterday", "²h", "٣h", "-2h"):  # a superscript and an Arabic-Indic digit pass str.isdigit()
        since = await asyncio.to_thread(run_cli, "retry", "--failed", "--since", age, "--valkey-url", valkey_url)
        assert since.returncode == 2 and "--since" in since.stderr and "Traceback" not in since.stderr, age
    name = await asyncio.to_thread(run_cli, "drain", "../etc", "--valkey-url", valkey_url)
    assert name.returncode == 2 and "not a worker name" in name.stderr


async def test_a_drain_of_a_host_not_running_is_recorded_for_when_it_starts(
    client: aioredis.Redis, valkey_url: str
) -> None:
    drained = await asyncio.to_thread(run_cli, "drain", "mini9", "--deadline", "60", "--valkey-url", valkey_url)
    assert drained.returncode == 0 and "applies when one starts" in drained.stdout
    fact = await read_drain(client, "mini9")
    assert fact is not None and fact.deadline_ms is not None and fact.deadline_ms - fact.since_ms == 60_000
    resumed = await asyncio.to_thread(run_cli, "resume", "mini9", "--valkey-url", valkey_url)
    assert resumed.returncode == 0 and await read_drain(client, "mini9") is None
