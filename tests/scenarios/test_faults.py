"""Faults the fleet survives, against real redis-server, real Docker (the machine's and a private dockerd) and real
worker processes: a dead named host, a lock that is taken, a store or a daemon that goes away, a dockerd restart."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from bullmq import Queue

from pi_dispatch.core.keys import bull_key, host_queue_name
from pi_dispatch.demo.jobimage import build_example_image
from pi_dispatch.fleet.rehome import MAX_STALLS
from pi_dispatch.testing.jobs import RESOLVER, forge_job, write_script
from pi_dispatch.testing.services import PrivateDocker, RedisServer
from pi_dispatch.worker.after.history import read_records
from tests.support.helpers import run_cli_process
from tests.support.workers import (
    ContainerWatch,
    finished_job,
    job_in_state,
    running_worker,
    settings_of,
    start_worker_process,
    wait_for_line,
    worker_env,
)

pytestmark = [pytest.mark.slow]


def events_named(events: list[tuple[str, dict[str, Any]]], name: str) -> list[dict[str, Any]]:
    return [fields for event, fields in events if event == name]


@pytest.fixture
async def queue_of(valkey_url: str, client: aioredis.Redis) -> AsyncIterator[Any]:
    opened: dict[str, Queue] = {}

    def open_queue(name: str) -> Queue:
        if name not in opened:
            opened[name] = Queue(name, {"connection": valkey_url})
        return opened[name]

    try:
        yield open_queue
    finally:
        for queue in opened.values():
            await queue.close()


async def moved_off(events: list[tuple[str, dict[str, Any]]], ids: list[str]) -> dict[str, tuple[str, str]]:
    """Each job's way off the dead host's queue and where to: ("job_rehomed", its target) or ("job_stolen", ...)."""
    deadline = time.monotonic() + 60
    while True:
        moves: dict[str, tuple[str, str]] = {}
        for event, fields in list(events):
            if event == "job_rehomed":
                moves.setdefault(fields["jobId"], (event, fields["to"]))
            elif event == "job_stolen":
                moves.setdefault(fields["jobId"], (event, host_queue_name("rescuer")))
        if set(ids) <= moves.keys() or time.monotonic() > deadline:
            return moves
        await asyncio.sleep(0.1)


@pytest.mark.docker
@pytest.mark.redis
@pytest.mark.timeout(900)  # about 75 s alone: a 20 s job, a lock to expire, a re-home; its own waits bound it
async def test_a_dead_named_hosts_jobs_run_elsewhere_all_of_them_once(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis, job_image: str, queue_of: Any
) -> None:
    resolver = write_script(tmp_path / "resolver", RESOLVER)
    profiles = {"PI_SECRET_PROFILES": f"prod:{resolver}", "PI_REHOME_AFTER_MS": "10000", "PI_CONCURRENCY": "1"}
    victim_log = tmp_path / "victim.log"
    victim = start_worker_process(worker_env(tmp_path, valkey_url, job_image, "victim", **profiles), victim_log)
    try:
        await wait_for_line(victim_log, "worker_started")
        queue = queue_of(host_queue_name("victim"))
        ids = ["gh-long", "gh-next-1", "gh-next-2"]
        await queue.add("github", forge_job(1, secretsProfile="prod", trigger={"demoSleep": 20}), {"jobId": ids[0]})
        await job_in_state(queue, ids[0], ("active",))
        for number, job_id in enumerate(ids[1:], start=2):
            await queue.add("github", forge_job(number, secretsProfile="prod"), {"jobId": job_id})
        victim.send_signal(signal.SIGKILL)  # for good: its row goes stale, its lock expires, nobody drains its queue
        victim.wait()
        env = worker_env(tmp_path, valkey_url, job_image, "rescuer", **{**profiles, "PI_CONCURRENCY": "3"})
        async with running_worker(settings_of(env)) as rescuer:
            # ceilings only a hang reaches (a loaded machine took up to two minutes): the figure is bench/chaos.py's
            await job_in_state(queue_of("pi-jobs"), "gh-long", ("active",), timeout_s=400)
            # A waiting job leaves the dead host's queue one of two ways: re-homed (routing abstains with one capable
            # host live, so to the shared queue) or, while the dead host's row still looks live, stolen by the idle
            # rescuer onto its own queue. Either way exactly once, and it runs once, here.
            moves = await moved_off(rescuer.events.events, ids)
            for job_id in ids:
                job = await finished_job(queue_of(moves[job_id][1]), job_id, timeout_s=240)
                assert job.returnvalue["outcome"] == "completed"
            moved = [(f["jobId"], f["from"]) for e, f in rescuer.events.events if e in ("job_rehomed", "job_stolen")]
            assert sorted(moved) == sorted((job_id, "pi-jobs@victim") for job_id in ids)  # each once, off the victim
            assert moves["gh-long"][0] == "job_rehomed"  # active when its host died: only the re-homing moves it
        assert not await client.llen(bull_key("pi-jobs@victim", "wait"))
        hosts = {record["jobId"]: record["host"] for record in read_records(rescuer.logs_dir)}
        assert hosts["gh-next-1"] == hosts["gh-next-2"] == "rescuer"
    finally:
        if victim.poll() is None:
            victim.kill()


@pytest.mark.docker
@pytest.mark.redis
async def test_a_lock_taken_by_another_worker_kills_the_container_and_is_never_completed(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis, job_image: str, queue_of: Any, docker_client: Any
) -> None:
    queue = queue_of("pi-jobs")
    with ContainerWatch(docker_client, "gh-taken") as watch:
        async with running_worker(settings_of(worker_env(tmp_path, valkey_url, job_image, "fenced"))) as w:
            await queue.add("github", forge_job(1, trigger={"demoSleep": 60}), {"jobId": "gh-taken"})
            await job_in_state(queue, "gh-taken", ("active",))
            deadline = time.monotonic() + 30
            while not watch.most and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            taken_at = time.monotonic()
            await client.set(bull_key("pi-jobs", "gh-taken:lock"), "another-worker:1", px=120_000)
            while not events_named(w.events.events, "job_fenced") and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            fenced_after = time.monotonic() - taken_at
            await asyncio.sleep(1.0)
            running = docker_client.containers.list(filters={"label": "dev.pi-dispatch.job=gh-taken"})
    assert events_named(w.events.events, "job_fenced")[0]["reason"] == "lock-taken"
    assert fenced_after < 2.0 and running == []  # within a quarter of the 2 s lock, the container is gone
    failed = events_named(w.events.events, "job_failed")
    assert [fields["reason"] for fields in failed if fields["jobId"] == "gh-taken"] == ["lock-lost"]
    assert await queue.getJobState("gh-taken") != "completed"
    assert not events_named(w.events.events, "job_done")


@pytest.mark.docker
@pytest.mark.redis
async def test_a_queue_consumer_that_ends_ends_the_worker_with_exit_1(
    tmp_path: Path, valkey_url: str, job_image: str
) -> None:
    async with running_worker(settings_of(worker_env(tmp_path, valkey_url, job_image, "consumer"))) as w:
        await w.worker.bullmq_workers[0].close()
        assert await asyncio.wait_for(w.task, 60) == 1
    stopped = events_named(w.events.events, "worker_stopped")
    assert stopped[-1]["exit"] == 1 and "queue consumer ended" in stopped[-1]["reason"]


@pytest.mark.docker
@pytest.mark.redis
async def test_a_store_away_past_its_budget_ends_the_worker_with_exit_1(tmp_path: Path, job_image: str) -> None:
    (tmp_path / "store").mkdir()
    server = RedisServer(tmp_path / "store")
    server.start()
    try:
        env = worker_env(tmp_path, server.url, job_image, "orphaned")
        async with running_worker(settings_of(env), beat_ms=500) as w:
            server.stop()
            assert await asyncio.wait_for(w.task, 90) == 1
        assert "Valkey has been unreachable" in events_named(w.events.events, "worker_stopped")[-1]["reason"]
    finally:
        server.stop()


@pytest.mark.docker
def test_a_store_unreachable_at_boot_exits_1_with_one_line(tmp_path: Path, job_image: str) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens there once this closes
    env_file = tmp_path / "worker.env"
    env_file.write_text(f"VALKEY_URL=redis://127.0.0.1:{port}/0\nPI_JOB_IMAGE={job_image}\n")
    done = run_cli_process("worker", "--env-file", str(env_file))
    assert done.returncode == 1
    assert "Valkey is unreachable" in done.stdout + done.stderr and "Traceback" not in done.stderr


@pytest.fixture
def private_docker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateDocker]:
    daemon = PrivateDocker(Path(tmp_path_factory.mktemp("dockerd")), live_restore=True)
    daemon.start()
    try:
        import docker

        client = docker.DockerClient(base_url=daemon.url)
        try:
            build_example_image(client)
        finally:
            client.close()
        yield daemon
    finally:
        daemon.close()


@pytest.mark.docker
@pytest.mark.redis
async def test_a_dockerd_restart_mid_job_is_reattached_never_left_running_beside_a_retry(
    tmp_path: Path, valkey_url: str, queue_of: Any, private_docker: PrivateDocker, monkeypatch: pytest.MonkeyPatch
) -> None:
    import docker

    monkeypatch.setenv("DOCKER_HOST", private_docker.url)  # the worker's daemon; never the machine's
    env = worker_env(tmp_path, valkey_url, "pi-dispatch-example-job:latest", "restarts", PI_JOB_NETWORK="none")
    env["PI_LOCK_DURATION_MS"] = "30000"  # the restart takes seconds; the lock outlives it
    queue = queue_of("pi-jobs")
    watcher = docker.DockerClient(base_url=private_docker.url)
    try:
        async with running_worker(settings_of(env)) as w:
            await queue.add("github", forge_job(1, trigger={"demoSleep": 15}), {"jobId": "gh-restart"})
            await job_in_state(queue, "gh-restart", ("active",))
            deadline = time.monotonic() + 30
            while not watcher.containers.list(filters={"label": "dev.pi-dispatch.job=gh-restart"}):
                assert time.monotonic() < deadline
                await asyncio.sleep(0.1)
            await asyncio.to_thread(private_docker.restart)
            with ContainerWatch(watcher, "gh-restart") as watch:
                job = await finished_job(queue, "gh-restart", timeout_s=120)
        assert job.returnvalue["outcome"] == "completed" and job.attemptsMade == 1  # the same run, seen to its end
        names = w.events.names()
        assert "docker_lost_mid_job" in names and "container_reattached" in names
        assert watch.most <= 1
        assert watcher.containers.list(all=True, filters={"label": "dev.pi-dispatch.job=gh-restart"}) == []
    finally:
        watcher.close()


@pytest.mark.docker
@pytest.mark.redis
async def test_docker_gone_while_idle_ends_the_worker_with_exit_1(
    tmp_path: Path, valkey_url: str, private_docker: PrivateDocker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", private_docker.url)
    env = worker_env(tmp_path, valkey_url, "pi-dispatch-example-job:latest", "dockerless", PI_JOB_NETWORK="none")
    async with running_worker(settings_of(env)) as w:
        await asyncio.to_thread(private_docker.stop)
        assert await asyncio.wait_for(w.task, 90) == 1
    assert "Docker daemon has been unreachable" in events_named(w.events.events, "worker_stopped")[-1]["reason"]


HANGER = """
import asyncio, sys
from bullmq import Worker
async def hang(job, token):
    print("taken", flush=True)
    await asyncio.sleep(3600)
async def main():
    worker = Worker(sys.argv[2], hang, {"connection": sys.argv[1], "lockDuration": 1000, "stalledInterval": 600000})
    await worker.run()
asyncio.run(main())
"""


@pytest.mark.docker
@pytest.mark.redis
async def test_a_job_bullmq_fails_for_stalling_too_often_still_gets_a_record(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis, job_image: str, queue_of: Any
) -> None:
    queue = queue_of("pi-jobs")
    await queue.add("github", forge_job(61), {"jobId": "gh-stalls"})
    hanger = tmp_path / "hanger.py"
    hanger.write_text(HANGER)
    with subprocess.Popen([sys.executable, str(hanger), valkey_url, "pi-jobs"], stdout=subprocess.PIPE) as dying:
        try:
            assert dying.stdout is not None and dying.stdout.readline().strip() == b"taken"
        finally:
            dying.send_signal(signal.SIGKILL)
    await client.hset(bull_key("pi-jobs", "gh-stalls"), "stc", str(MAX_STALLS))  # it has stalled this often already
    async with running_worker(settings_of(worker_env(tmp_path, valkey_url, job_image, "inheritor"))) as w:
        job = await finished_job(queue, "gh-stalls", timeout_s=60)
        await w.worker.recorder.settle()
    assert job.returnvalue is None and "stalled more than allowable limit" in job.failedReason
    (record,) = [r for r in read_records(w.logs_dir) if r["jobId"] == "gh-stalls"]
    assert (record["outcome"], record["reason"], record["host"]) == ("failed", "job-stalled", "inheritor")
