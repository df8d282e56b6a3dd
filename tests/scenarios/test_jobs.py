"""Working with jobs on a real fleet: two worker processes on a real redis-server and Docker, and every command run
from another process, as an operator on another machine would: logs (followed, masked), job, cancel, retry, drain,
resume, and an enqueue that tells the truth."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from bullmq import Queue

from pi_dispatch.core.keys import job_log_key
from pi_dispatch.core.names import record_stem
from pi_dispatch.fleet.enqueue import forge_job_options
from pi_dispatch.testing.jobs import RESOLVER, forge_job, write_script
from tests.support.helpers import run_cli_process
from tests.support.workers import finished_job, job_in_state, start_worker_process, wait_for_line, worker_env

pytestmark = [pytest.mark.redis, pytest.mark.docker, pytest.mark.slow]
SECRET = "value-for-vault/deploy"  # what RESOLVER prints for the reference vault/deploy


@pytest.fixture
def fleet(tmp_path: Path, valkey_url: str, job_image: str, client: aioredis.Redis) -> Iterator[dict[str, Any]]:
    """mini1 and mini2, each a `pi-dispatch worker` process declaring the prod secret profile (started after the
    store is flushed, so their rows stand)."""
    resolver = write_script(tmp_path / "resolver", RESOLVER)
    envs, processes = {}, {}
    for name in ("mini1", "mini2"):
        envs[name] = worker_env(
            tmp_path, valkey_url, job_image, name, PI_SECRET_PROFILES=f"prod:{resolver}", PI_CONCURRENCY="1"
        )
        processes[name] = start_worker_process(envs[name], tmp_path / f"{name}.out")
    try:
        for name in processes:
            asyncio.run(wait_for_line(tmp_path / f"{name}.out", "worker_started"))
        yield {"envs": envs, "processes": processes, "tmp": tmp_path, "url": valkey_url}
    finally:
        for process in processes.values():
            process.terminate()
        for process in processes.values():
            process.wait(60)


@pytest.fixture
async def queues(valkey_url: str) -> AsyncIterator[dict[str, Queue]]:
    opened = {name: Queue(name, {"connection": valkey_url}) for name in ("pi-jobs", "pi-jobs@mini1", "pi-jobs@mini2")}
    try:
        yield opened
    finally:
        for queue in opened.values():
            await queue.close()


def cli(fleet: dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli_process(*args, "--valkey-url", fleet["url"])


async def add(queue: Queue, number: int, **trigger: Any) -> str:
    data = forge_job(number, secretsProfile="prod", secrets={"DEPLOY_TOKEN": "vault/deploy"}, trigger=trigger)
    options = {key: value for key, value in forge_job_options("github", data).items() if key != "deduplication"}
    return str((await queue.add("github", data, options)).id)


async def test_a_jobs_output_is_followed_from_another_process_and_its_secret_masked_everywhere(
    fleet: dict[str, Any], queues: dict[str, Queue], client: aioredis.Redis
) -> None:
    job_id = await add(queues["pi-jobs@mini1"], 1, demoLeak=1, demoTicks=3)
    await job_in_state(queues["pi-jobs@mini1"], job_id, ("active", "completed"))
    follow = subprocess.Popen(
        [sys.executable, "-m", "pi_dispatch", "logs", job_id, "-f", "--valkey-url", fleet["url"]],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = follow.communicate(timeout=60)
    assert follow.returncode == 0, err
    assert b"tick 3" in out and b"leaked: ***" in out and b"token=***" in out and b"ended at" in err
    assert f"{job_id} attempt 1 on mini1".encode() in out and b"(attempt 1 ended at" in err  # one numbering
    assert b"bytes of event, offline=1" in out  # the reference's PI_OFFLINE=1, on every job
    await finished_job(queues["pi-jobs@mini1"], job_id)
    shown = cli(fleet, "job", job_id, "--json")
    facts = json.loads(shown.stdout)
    assert shown.returncode == 0 and facts["state"] == "completed" and facts["history"][0]["host"] == "mini1"
    assert facts["attempts"] == {"made": 1, "allowed": 2, "left": 1}  # BullMQ's `atm`: the one attempt it made
    host_file = (fleet["tmp"] / "mini1" / "logs" / f"{record_stem(job_id)}.log").read_bytes()
    stream = await client.xrange(job_log_key(record_stem(job_id), 1))
    everything = [out, host_file, shown.stdout.encode(), repr(stream).encode()]
    everything += [(fleet["tmp"] / f"{name}.out").read_bytes() for name in ("mini1", "mini2")]
    forms = [SECRET.encode(), base64.b64encode(SECRET.encode()), b"vault%2Fdeploy"]
    assert [form for form in forms for text in everything if form in text] == []
    assert b"leaked: ***" in host_file and b"tick 1" in host_file
    tail = cli(fleet, "logs", job_id, "--tail", "1")
    assert tail.returncode == 0 and tail.stdout.strip().endswith("tick 3"), tail.stdout


async def test_a_running_job_is_cancelled_from_another_process_and_a_retry_runs_it_again(
    fleet: dict[str, Any], queues: dict[str, Queue], client: aioredis.Redis, docker_client: Any
) -> None:
    job_id = await add(queues["pi-jobs@mini2"], 2, demoSleep=60)
    await job_in_state(queues["pi-jobs@mini2"], job_id, ("active",))
    await asyncio.sleep(1)  # its container is up
    began = time.monotonic()
    cancelled = cli(fleet, "cancel", job_id)
    assert cancelled.returncode == 0 and "container stopped" in cancelled.stdout, cancelled.stdout + cancelled.stderr
    assert time.monotonic() - began < 20
    job = await finished_job(queues["pi-jobs@mini2"], job_id)
    assert job.failedReason.startswith("operator-cancel") and job.attemptsMade <= 1  # never retried
    assert docker_client.containers.list(filters={"label": f"dev.pi-dispatch.job={job_id}"}) == []
    assert "nothing to cancel" in cli(fleet, "cancel", job_id).stderr

    retried = cli(fleet, "retry", job_id)
    assert retried.returncode == 0 and "retried" in retried.stdout, retried.stderr
    assert cli(fleet, "retry", job_id).returncode == 1  # still on its way
    assert cli(fleet, "cancel", job_id).returncode == 0  # and cancelled again, wherever it was routed
    attempts = json.loads(cli(fleet, "runs", "--job", job_id, "--json").stdout)["runs"]
    assert [run["reason"] for run in attempts][:1] == ["operator-cancel"] and len(attempts) >= 2
    assert cli(fleet, "job", "gh-no-such-job").returncode == 1


async def test_a_drained_host_finishes_its_running_job_and_its_waiting_ones_move_to_a_peer(
    fleet: dict[str, Any], queues: dict[str, Queue], client: aioredis.Redis
) -> None:
    running = await add(queues["pi-jobs@mini1"], 3, demoSleep=6)
    await job_in_state(queues["pi-jobs@mini1"], running, ("active",))
    waiting = [await add(queues["pi-jobs@mini1"], number) for number in (4, 5)]
    drained = cli(fleet, "drain", "mini1")
    assert drained.returncode == 0 and "draining (its row says so)" in drained.stdout, drained.stdout
    hosts = json.loads(cli(fleet, "hosts", "--json").stdout)
    assert {row["name"]: row.get("draining") for row in hosts}["mini1"] is True
    for job_id in waiting:  # moved to mini2, which runs them
        done = await finished_job(queues["pi-jobs@mini2"], job_id)
        assert done.returnvalue["outcome"] == "completed"
    assert (await finished_job(queues["pi-jobs@mini1"], running)).returnvalue["outcome"] == "completed"

    fleet["processes"]["mini1"].terminate()  # the drain outlives a restart
    fleet["processes"]["mini1"].wait(60)
    log = fleet["tmp"] / "mini1-again.out"
    fleet["processes"]["mini1"] = start_worker_process(fleet["envs"]["mini1"], log)
    await wait_for_line(log, "host_draining")
    late = await add(queues["pi-jobs@mini1"], 6)
    assert (await finished_job(queues["pi-jobs@mini2"], late)).returnvalue["outcome"] == "completed"
    resumed = cli(fleet, "resume", "mini1")
    assert resumed.returncode == 0 and "resumed" in resumed.stdout
    after = await add(queues["pi-jobs@mini1"], 7)
    assert (await finished_job(queues["pi-jobs@mini1"], after)).returnvalue["outcome"] == "completed"


def test_enqueue_of_an_existing_job_says_so(fleet: dict[str, Any], tmp_path: Path) -> None:
    job = tmp_path / "job.json"
    job.write_text(json.dumps(forge_job(8)))
    first = cli(fleet, "enqueue", "--job", str(job))
    assert first.returncode == 0 and "enqueued gh-d-8" in first.stdout
    again = cli(fleet, "enqueue", "--job", str(job), "--json")
    answer = json.loads(again.stdout)
    assert again.returncode == 1 and answer["added"] is False and answer["result"] == "exists"
    assert cli(fleet, "enqueue", "--job", str(job), "--if-absent").returncode == 0
