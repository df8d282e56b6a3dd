"""The worker stopping, and failing, against a real redis-server, real BullMQ and a real Docker daemon: a drain on
SIGTERM, a store gone while it stops, a SIGKILL, an outage, a config error and Docker gone."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import socket
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from bullmq import Queue

from pi_dispatch.core.keys import HOST_LIVE, host_row_key
from pi_dispatch.testing.jobs import forge_job
from pi_dispatch.testing.services import RedisServer
from pi_dispatch.worker.after.history import read_records
from pi_dispatch.worker.run.containers import LABEL_HOST
from tests.support.helpers import run_cli
from tests.support.workers import (
    FAST_RETRY,
    ContainerWatch,
    finished_job,
    job_in_state,
    record_of,
    running_worker,
    settings_of,
    start_worker_process,
    wait_for_line,
    worker_env,
)


@pytest.mark.docker
@pytest.mark.redis
@pytest.mark.slow
async def test_sigterm_drains_running_jobs_and_removes_the_row(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis, job_image: str, queues: dict[str, Queue]
) -> None:
    log = tmp_path / "worker.log"
    env = worker_env(tmp_path, valkey_url, job_image, "drainer", PI_DRAIN_GRACE_MS="8000")
    child = start_worker_process(env, log)
    try:
        await wait_for_line(log, "worker_started")
        queue = queues["pi-jobs"]
        await queue.add("github", forge_job(1, trigger={"demoSleep": 2}), {"jobId": "gh-short"})
        await queue.add("github", forge_job(2, trigger={"demoSleep": 120}), {"jobId": "gh-long"})
        for job_id in ("gh-short", "gh-long"):
            await job_in_state(queue, job_id, ("active",))
        await asyncio.sleep(0.5)
        child.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(child.wait, 90) == 0
    finally:
        if child.poll() is None:
            child.kill()
    assert await queue.getJobState("gh-short") == "completed"  # finished within the grace
    long = await queue.getJob("gh-long")
    assert await queue.getJobState("gh-long") in ("waiting", "delayed", "wait")
    assert long.attemptsMade == 0  # put back, not failed: another host takes it
    assert not await client.exists(host_row_key("drainer"))
    assert b"drainer" not in await client.smembers(HOST_LIVE)
    assert "drain_grace_over" in log.read_text()


@pytest.mark.docker
@pytest.mark.redis
@pytest.mark.slow
async def test_a_worker_stopped_while_the_store_is_gone_and_its_job_is_writing_still_exits(
    tmp_path: Path, private_redis: RedisServer, job_image: str, docker_client: Any
) -> None:
    """The job's last write retries for minutes against a store that is gone; the stop forces the consumers
    closed instead of leaving them to the loop's shutdown (where BullMQ's close spins forever)."""
    log = tmp_path / "worker.log"
    env = worker_env(tmp_path, private_redis.url, job_image, "stranded", PI_DRAIN_GRACE_MS="2000")
    child = start_worker_process(env, log)
    try:
        await wait_for_line(log, "worker_started")
        queue = Queue("pi-jobs@stranded", {"connection": private_redis.url})
        await queue.add("github", forge_job(1, trigger={"demoSleep": 120}), {"jobId": "gh-stranded"})
        await job_in_state(queue, "gh-stranded", ("active",))
        await queue.close()
        while not docker_client.containers.list(filters={"label": f"{LABEL_HOST}=stranded"}):
            await asyncio.sleep(0.2)  # its container runs
        child.send_signal(signal.SIGTERM)
        private_redis.stop()
        for container in docker_client.containers.list(filters={"label": f"{LABEL_HOST}=stranded"}):
            container.remove(force=True)
        assert await asyncio.to_thread(child.wait, 120) == 0
    finally:
        if child.poll() is None:
            child.kill()
    assert "consumers_forced_closed" in log.read_text()


@pytest.mark.docker
@pytest.mark.redis
@pytest.mark.slow
async def test_a_sigkilled_workers_job_is_recovered_and_runs_elsewhere(
    tmp_path: Path,
    valkey_url: str,
    client: aioredis.Redis,
    job_image: str,
    queues: dict[str, Queue],
    docker_client: Any,
) -> None:
    log = tmp_path / "victim.log"
    child = start_worker_process(worker_env(tmp_path, valkey_url, job_image, "victim"), log)
    try:
        await wait_for_line(log, "worker_started")
        queue = queues["pi-jobs"]
        await queue.add("github", forge_job(1, trigger={"demoSleep": 3}), {"jobId": "gh-orphan", **FAST_RETRY})
        await job_in_state(queue, "gh-orphan", ("active",))
        child.send_signal(signal.SIGKILL)
        child.wait(30)
        async with running_worker(settings_of(worker_env(tmp_path, valkey_url, job_image, "rescuer"))) as rescuer:
            job = await finished_job(queue, "gh-orphan")
            assert job.returnvalue["outcome"] == "completed"
            assert record_of(rescuer.logs_dir, "gh-orphan")["host"] == "rescuer"
    finally:
        if child.poll() is None:
            child.kill()
        for container in docker_client.containers.list(all=True, filters={"label": f"{LABEL_HOST}=victim"}):
            container.remove(force=True)


@pytest.mark.docker
@pytest.mark.redis
@pytest.mark.slow
async def test_the_worker_survives_a_valkey_outage_and_finishes_the_queue(
    tmp_path: Path, job_image: str, docker_client: Any
) -> None:
    server = RedisServer(tmp_path / "store", persist=True)
    (tmp_path / "store").mkdir()
    server.start()
    queue = Queue("pi-jobs", {"connection": server.url})
    try:
        env = worker_env(tmp_path, server.url, job_image, "survivor")
        with ContainerWatch(docker_client, "gh-during") as watch:
            async with running_worker(settings_of(env)) as w:
                job = forge_job(1, trigger={"demoSleep": 15})  # still running when the job is free to run again
                await queue.add("github", job, {"jobId": "gh-during", **FAST_RETRY})
                await job_in_state(queue, "gh-during", ("active",))
                await watch.started()  # its start counted in the store before the store goes
                server.stop()
                await asyncio.sleep(4)  # twice the lock: the store lets the lock go, and the worker its container
                assert not w.task.done()
                server.start()
                for number in range(2, 5):
                    await queue.add("github", forge_job(number), {"jobId": f"gh-after-{number}", **FAST_RETRY})
                for job_id in ("gh-during", "gh-after-2", "gh-after-3", "gh-after-4"):
                    done = await finished_job(queue, job_id, timeout_s=120)
                    assert done.returnvalue is not None, (job_id, done.failedReason)
                    assert done.returnvalue["outcome"] == "completed"
                assert not w.task.done()
        assert "host_registry_unreachable" in w.events.names() or "queue_error" in w.events.names()
        assert watch.samples > 20 and watch.most == 1  # the job ran again, never beside its fenced first run
        assert "job_fenced" in w.events.names()
        failed = [fields for event, fields in w.events.events if event == "job_failed"]
        assert any(fields["jobId"] == "gh-during" and fields["reason"] == "lock-lost" for fields in failed)
    finally:
        await queue.close()
        server.stop()


@pytest.mark.slow
def test_a_config_error_exits_2_before_anything_connects(tmp_path: Path) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.2)
    accepted: list[object] = []

    def accept() -> None:
        for _ in range(50):
            try:
                accepted.append(listener.accept())
            except TimeoutError:
                continue

    watcher = threading.Thread(target=accept)
    watcher.start()
    env_file = tmp_path / "worker.env"
    port = listener.getsockname()[1]
    env_file.write_text(f"VALKEY_URL=redis://127.0.0.1:{port}\nPI_CONCURRENCY=0\nPI_JOB_CPUS=lots\n")
    result = run_cli("worker", "--env-file", str(env_file))
    watcher.join()
    listener.close()
    assert result.returncode == 2
    assert "PI_CONCURRENCY" in result.stderr and "PI_JOB_CPUS" in result.stderr
    assert accepted == []


def test_the_worker_never_logs_a_profile_path(tmp_path: Path) -> None:
    from pi_dispatch.worker.entry import settings_summary

    env = {"PI_WORKER_NAME": "m", "PI_SECRET_PROFILES": f"prod:{tmp_path}/r", "PI_WAIT_PROFILES": f"ci:{tmp_path}/c"}
    summary = json.dumps(settings_summary(settings_of(env)))
    assert str(tmp_path) not in summary and "prod" in summary and "ci" in summary
    assert os.sep + "r" not in summary


@pytest.mark.docker
@pytest.mark.redis
@pytest.mark.slow
async def test_concurrency_bounds_the_machine_across_both_queues(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis, job_image: str, queues: dict[str, Queue]
) -> None:
    env = worker_env(tmp_path, valkey_url, job_image, "mini1", PI_CONCURRENCY="1", PI_CAPTURE_JOB_LOGS="0")
    async with running_worker(settings_of(env)) as w:
        jobs = [("pi-jobs", "gh-shared"), ("pi-jobs@mini1", "gh-own"), ("pi-jobs", "gh-shared-2")]
        for number, (queue, job_id) in enumerate(jobs):
            await queues[queue].add("github", forge_job(number, trigger={"demoSleep": 1}), {"jobId": job_id})
        for queue, job_id in jobs:
            await finished_job(queues[queue], job_id)
    # each container sleeps 1 s: one at a time, their ends are at least a second apart
    ends = sorted(datetime.fromisoformat(record["endedAt"]) for record in read_records(w.logs_dir))
    assert len(ends) == 3
    assert all((later - earlier).total_seconds() >= 1.0 for earlier, later in itertools.pairwise(ends)), ends
    assert not list(w.logs_dir.glob("*.log"))  # with PI_CAPTURE_JOB_LOGS=0 no output is kept


@pytest.mark.slow
def test_without_docker_the_worker_exits_1_so_systemd_retries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    env_file = tmp_path / "worker.env"
    env_file.write_text(f"PI_WORKER_NAME=mini1\nPI_LOGS_DIR={tmp_path}/logs\n")
    result = run_cli("worker", "--env-file", str(env_file))
    assert result.returncode == 1
    assert "Docker daemon is not reachable" in result.stderr and "Traceback" not in result.stderr
