"""The worker against a real redis-server, real BullMQ and a real Docker daemon running the example job image."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from bullmq import Queue

from pi_dispatch.core.keys import host_queue_name, host_row_key
from pi_dispatch.core.waits import HOLD_KEY
from pi_dispatch.fleet.enqueue import Enqueuer, ForgeRouter, registry_reader
from pi_dispatch.fleet.mirror import read_mirrored_runs
from pi_dispatch.infra.store import StoreAddress
from pi_dispatch.testing.jobs import RESOLVER, forge_job, write_script
from pi_dispatch.worker.after.history import read_records
from tests.support.workers import (
    FAST_RETRY,
    finished_job,
    job_in_state,
    record_of,
    running_worker,
    settings_of,
    worker_env,
)


@pytest.mark.docker
@pytest.mark.redis
@pytest.mark.slow
async def test_a_fleet_routes_by_capability_and_spreads_the_rest(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis, job_image: str, queues: dict[str, Queue]
) -> None:
    resolver = write_script(tmp_path / "prod-resolver", RESOLVER)
    check = write_script(tmp_path / "ci-check", "#!/bin/sh\nexit 0\n")
    mini1 = settings_of(
        worker_env(
            tmp_path,
            valkey_url,
            job_image,
            "mini1",
            PI_SECRET_PROFILES=f"prod:{resolver}",
            PI_WAIT_PROFILES=f"ci:{check}",
        )
    )
    mini2 = settings_of(worker_env(tmp_path, valkey_url, job_image, "mini2", PI_WAIT_PROFILES=f"ci:{check}"))
    mini3 = settings_of(worker_env(tmp_path, valkey_url, job_image, None), hostname="mini3")
    async with running_worker(mini1) as w1, running_worker(mini2) as w2, running_worker(mini3) as w3:
        row = await client.hgetall(host_row_key("mini1"))
        assert row[b"caps"] == b"s:prod,w:ci" and row[b"routes"] == b"true"
        assert row[b"image"] == job_image.encode() and row[b"imageDigest"].startswith(b"sha256:")
        assert row[b"concurrency"] == b"2" and row[b"pid"] == str(os.getpid()).encode()
        assert {b"version", b"tz", b"startedAt", b"beatAt", b"name"} <= set(row)
        assert not [value for value in row.values() if value.startswith(b"/")]  # names, never paths
        assert (await client.hgetall(host_row_key("mini3")))[b"routes"] == b"false"
        enqueuer = Enqueuer(StoreAddress(valkey_url), ForgeRouter(registry_reader(client)))
        placed: dict[str, str] = {}
        for number in range(1, 5):
            job = forge_job(number, secretsProfile="prod", secrets={"DEPLOY_TOKEN": f"ref-{number}"})
            queue, job_id, _ = await enqueuer.enqueue_forge_job("github", job)
            placed[job_id] = queue
        for number in range(10, 18):
            queue, job_id, _ = await enqueuer.enqueue_forge_job("github", forge_job(number, trigger={"demoSleep": 1}))
            placed[job_id] = queue
        await enqueuer.close()
        for job_id, queue in placed.items():
            assert (await finished_job(queues[queue], job_id)).returnvalue["outcome"] == "completed"
        by_host = {w.worker.name: {r["jobId"] for r in read_records(w.logs_dir)} for w in (w1, w2, w3)}
        secret_jobs = {job_id for job_id, queue in placed.items() if queue == host_queue_name("mini1")}
        assert len(secret_jobs) == 4 and secret_jobs <= by_host["mini1"]
        assert not secret_jobs & (by_host["mini2"] | by_host["mini3"])
        plain = set(placed) - secret_jobs
        assert all(placed[job_id] == "pi-jobs" for job_id in plain)
        assert sum(1 for ran in by_host.values() if ran & plain) >= 2, by_host  # spread over hosts
        mirrored = await read_mirrored_runs(client, limit=50)
        hosts = {run["jobId"]: run["host"] for run in mirrored.runs}
        # only hosts with a declared name mirror; each mirrored run names the host that ran it
        assert {job_id for job_id, host in hosts.items() if host == "mini1"} == by_host["mini1"]
        assert {job_id for job_id, host in hosts.items() if host == "mini2"} == by_host["mini2"]
        assert w3.worker.name == "mini3" and not set(hosts) & by_host["mini3"]
        for job_id in secret_jobs:
            assert record_of(w1.logs_dir, job_id)["host"] == "mini1"


@pytest.mark.docker
@pytest.mark.redis
@pytest.mark.slow
async def test_a_secret_reaches_the_container_as_env_and_nowhere_else(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis, job_image: str, queues: dict[str, Queue]
) -> None:
    resolver = write_script(tmp_path / "resolver", RESOLVER)
    env = worker_env(tmp_path, valkey_url, job_image, "mini1", PI_SECRET_PROFILES=f"prod:{resolver}")
    env["PI_CAPTURE_JOB_LOGS"] = "1"
    async with running_worker(settings_of(env)) as w:
        job = forge_job(1, secretsProfile="prod", secrets={"DEPLOY_TOKEN": "vault/deploy"})
        await queues["pi-jobs"].add("github", job, {"jobId": "gh-secret", **FAST_RETRY})
        done = await finished_job(queues["pi-jobs"], "gh-secret")
        await w.worker.recorder.settle()
    assert done.returnvalue["outcome"] == "completed"
    value = "value-for-vault/deploy"
    digest = hashlib.sha256(value.encode()).hexdigest()[:16]
    assert f"DEPLOY_TOKEN bound: {digest}" in (w.logs_dir / "gh-secret.log").read_text()
    everything = [(w.logs_dir / "gh-secret.json").read_text(), json.dumps(w.events.events)]
    everything += [repr(v) for v in (await client.hgetall("bull:pi-jobs:gh-secret")).values()]
    everything += [repr(await client.get(key)) for key in await client.keys("runs:rec:*")]
    assert not [text for text in everything if value in text or resolver in text]


@pytest.mark.docker
@pytest.mark.redis
@pytest.mark.slow
async def test_undeclared_profiles_are_refused_once_and_never_retried(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis, job_image: str, queues: dict[str, Queue]
) -> None:
    async with running_worker(settings_of(worker_env(tmp_path, valkey_url, job_image, "mini2"))) as w:
        await queues["pi-jobs"].add("github", forge_job(1, secretsProfile="prod"), {"jobId": "gh-s", **FAST_RETRY})
        wait_for = [{"profile": "ci"}]
        await queues["pi-jobs"].add("github", forge_job(2, waitFor=wait_for), {"jobId": "gh-w", **FAST_RETRY})
        secret, wait = [await finished_job(queues["pi-jobs"], job_id) for job_id in ("gh-s", "gh-w")]
    for job, reason in ((secret, "secret-profile-unknown"), (wait, "wait-profile-unknown")):
        assert job.returnvalue == {
            "outcome": "policy",
            "reason": reason,
            "exitCode": None,
            "turns": None,
            "tokens": None,
            "budgetReserved": False,
        }
        assert job.attemptsMade == 1
        record = record_of(w.logs_dir, job.id)
        assert (record["outcome"], record["reason"], record["host"]) == ("policy", reason, "mini2")
    refusals = [fields for event, fields in w.events.events if event == "job_refused"]
    assert refusals == [
        {"jobId": "gh-s", "reason": "secret-profile-unknown", "profile": "prod"},
        {"jobId": "gh-w", "reason": "wait-profile-unknown", "profile": "ci"},
    ]
    assert not [name for name in w.events.names() if name == "wait_hold"]


@pytest.mark.docker
@pytest.mark.redis
@pytest.mark.slow
async def test_exit_2_is_policy_and_not_retried_exit_1_is_retried(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis, job_image: str, queues: dict[str, Queue]
) -> None:
    async with running_worker(settings_of(worker_env(tmp_path, valkey_url, job_image, "mini1"))) as w:
        queue = queues["pi-jobs"]
        await queue.add("github", forge_job(1, trigger={"demoExit": 2}), {"jobId": "gh-2", **FAST_RETRY})
        await queue.add("github", forge_job(2, trigger={"demoExit": 1}), {"jobId": "gh-1", **FAST_RETRY})
        await queue.add("github", forge_job(3, trigger={"demoExit": 0}), {"jobId": "gh-0", **FAST_RETRY})
        policy, infra, ok = [await finished_job(queue, job_id) for job_id in ("gh-2", "gh-1", "gh-0")]
    assert await queue.getJobState("gh-2") == "completed"
    assert (policy.returnvalue["outcome"], policy.returnvalue["reason"], policy.attemptsMade) == (
        "policy",
        "container-policy",
        1,
    )
    assert await queue.getJobState("gh-1") == "failed" and infra.attemptsMade == 2
    assert infra.failedReason == "container-failed (exit 1)"
    assert infra.stacktrace == []  # a trace would name our files' paths
    runs = [fields for event, fields in w.events.events if event == "job_failed" and fields["jobId"] == "gh-1"]
    assert len(runs) == 2
    record = record_of(w.logs_dir, "gh-1")
    assert (record["outcome"], record["reason"], record["exitCode"], record["attempt"]) == (
        "failed",
        "container-failed",
        1,
        1,
    )
    assert ok.returnvalue["exitCode"] == 0 and record_of(w.logs_dir, "gh-0")["outcome"] == "completed"


@pytest.mark.docker
@pytest.mark.redis
@pytest.mark.slow
async def test_a_job_over_its_timeout_is_stopped_and_not_retried(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis, job_image: str, queues: dict[str, Queue]
) -> None:
    env = worker_env(tmp_path, valkey_url, job_image, "mini1", PI_JOB_TIMEOUT_MS="1500")
    async with running_worker(settings_of(env)) as w:
        await queues["pi-jobs"].add("github", forge_job(1, trigger={"demoSleep": 60}), {"jobId": "gh-t", **FAST_RETRY})
        job = await finished_job(queues["pi-jobs"], "gh-t")
    assert await queues["pi-jobs"].getJobState("gh-t") == "failed" and job.attemptsMade == 1
    assert record_of(w.logs_dir, "gh-t")["reason"] == "worker-abort"


@pytest.mark.docker
@pytest.mark.redis
@pytest.mark.slow
async def test_hostile_job_data_never_crashes_the_worker(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis, job_image: str, queues: dict[str, Queue]
) -> None:
    async with running_worker(settings_of(worker_env(tmp_path, valkey_url, job_image, "mini1"))) as w:
        queue = queues["pi-jobs"]
        hostile: list[Any] = [
            "a string",
            [1, 2],
            {"kind": "github", "image": "--privileged"},
            {"kind": "github", "secretsProfile": "x" * 10_000, "secrets": {"A=B": 1}},
            {"kind": "github", "waitFor": "soon"},
            {"kind": "github", "waitFor": [{"after": "2026-02-31T00:00:00Z"}]},
            {"kind": "github", "trigger": {"deliveryId": "\ud800"}, "image": None},
        ]
        for index, data in enumerate(hostile):
            await queue.add("github", data, {"jobId": f"h-{index}", "attempts": 1})
        await queue.add("github", forge_job(99), {"jobId": "gh-after"})
        jobs = [await finished_job(queue, f"h-{index}") for index in range(len(hostile))]
        after = await finished_job(queue, "gh-after")
        assert not w.task.done()
    assert after.returnvalue["outcome"] == "completed"
    reasons = [job.returnvalue["reason"] if job.returnvalue else job.failedReason for job in jobs]
    assert reasons[2] == "job-image-missing"
    assert reasons[3] == "secret-profile-unknown"
    assert reasons[4:6] == ["wait-unreadable", "wait-unreadable"]
    assert len(read_records(w.logs_dir)) == len(hostile) + 1


@pytest.mark.docker
@pytest.mark.redis
@pytest.mark.slow
async def test_wait_holds_are_delayed_jobs_that_spend_no_attempt(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis, job_image: str, queues: dict[str, Queue]
) -> None:
    ready = tmp_path / "ci-is-green"
    seen = tmp_path / "targets"
    check = write_script(tmp_path / "ci-check", f'#!/bin/sh\necho "$1" >> {seen}\n[ -e {ready} ] && exit 0\nexit 3\n')
    refuse = write_script(tmp_path / "refuse", "#!/bin/sh\nexit 2\n")
    broken = write_script(tmp_path / "broken", "#!/bin/sh\nexit 1\n")
    env = worker_env(
        tmp_path,
        valkey_url,
        job_image,
        "mini1",
        PI_WAIT_PROFILES=f"ci:{check},closed:{refuse},flaky:{broken}",
        PI_WAIT_MAX_FAULTS="2",
        PI_WAIT_CHECK_SLOTS="2",
    )
    async with running_worker(settings_of(env)) as w:
        queue = queues["pi-jobs"]
        await queue.add("github", forge_job(7, waitFor=[{"profile": "ci"}]), {"jobId": "gh-held", **FAST_RETRY})
        await job_in_state(queue, "gh-held", ("delayed",))
        held = await queue.getJob("gh-held")
        assert held.attemptsMade == 0 and held.data[HOLD_KEY]["checks"] == 1 and held.data[HOLD_KEY]["faults"] == 0
        assert seen.read_text() == "acme/app#7\n"
        ready.touch()
        await held.promote()
        done = await finished_job(queue, "gh-held")
        assert done.returnvalue["outcome"] == "completed" and done.attemptsMade == 1

        await queue.add("github", forge_job(8, waitFor=[{"profile": "closed"}]), {"jobId": "gh-refused"})
        refused = await finished_job(queue, "gh-refused")
        assert refused.returnvalue["reason"] == "wait-refused"

        await queue.add("github", forge_job(9, waitFor=[{"profile": "flaky"}]), {"jobId": "gh-flaky"})
        await job_in_state(queue, "gh-flaky", ("delayed",))
        await (await queue.getJob("gh-flaky")).promote()
        flaky = await finished_job(queue, "gh-flaky")
        assert flaky.returnvalue["reason"] == "wait-unanswerable" and flaky.attemptsMade == 1
        future = "2099-01-01T00:00:00Z"
        await queue.add("github", forge_job(10, waitFor=[{"after": future}]), {"jobId": "gh-far"})
        far = await finished_job(queue, "gh-far")
        assert far.returnvalue["reason"] == "wait-after-beyond-max"
    holds = [fields for event, fields in w.events.events if event == "wait_hold"]
    assert [fields["jobId"] for fields in holds] == ["gh-held", "gh-flaky"]
    assert record_of(w.logs_dir, "gh-flaky")["reason"] == "wait-unanswerable"
