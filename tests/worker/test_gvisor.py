"""Jobs under gVisor, on real Docker with gVisor's runsc registered as the runsc runtime: a runsc profile's jobs run
under gVisor's own kernel and the host says it can run runsc; a host whose own runtime fails its boot canary takes
no job; a runtime's failed start leaves nothing running after the reap; a profile whose runtime failed is neither
advertised nor run."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from bullmq import Queue
from docker import errors as docker_errors

from pi_dispatch.core.capabilities import parse_caps
from pi_dispatch.core.egressprofiles import EgressPlan
from pi_dispatch.core.keys import host_row_key
from pi_dispatch.core.names import record_stem
from pi_dispatch.core.reasons import Reason
from pi_dispatch.core.runtimes import RUNSC, RuntimeChoice
from pi_dispatch.testing.jobs import RESOLVER, forge_job, write_script
from pi_dispatch.worker.gates.jobplace import JobPlace
from pi_dispatch.worker.gates.scripts import Refusal
from pi_dispatch.worker.gates.secrets import SecretsGate
from pi_dispatch.worker.host.canary import CANARY_JOB, try_runtimes
from pi_dispatch.worker.run.containers import LABEL_FLEET, LABEL_HOST, LABEL_INSTANCE, LABEL_JOB, ContainerRuntime
from tests.support.helpers import run_cli
from tests.support.workers import CEILING_S, finished_job, running_worker, settings_of, worker_env

UNREGISTERED = "pi-test-no-such-runtime"


def _row(raw: dict[bytes, bytes]) -> dict[str, str]:
    return {key.decode(): value.decode() for key, value in raw.items()}


@pytest.mark.docker
@pytest.mark.redis
@pytest.mark.gvisor
@pytest.mark.slow
async def test_a_runsc_profiles_jobs_run_under_gvisor_and_the_host_says_it_can(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis, job_image: str, gvisor: str, queue: Queue
) -> None:
    resolver = write_script(tmp_path / "resolver", RESOLVER)
    env = worker_env(
        tmp_path, valkey_url, job_image, "sandboxed",
        PI_SECRET_PROFILES=f"deploy:{resolver},review:{resolver}", PI_RUNSC_PROFILES="deploy",
    )  # fmt: skip
    async with running_worker(settings_of(env)) as w:
        row = _row(await client.hgetall(host_row_key("sandboxed")))
        for number, profile in enumerate(("deploy", "review")):
            job = forge_job(number, secretsProfile=profile, trigger={"demoKernel": 1})
            await queue.add("github", job, {"jobId": f"gh-{profile}"})
        ended = {profile: await finished_job(queue, f"gh-{profile}") for profile in ("deploy", "review")}
        said = {p: (w.worker.settings.logs_dir / f"{record_stem(f'gh-{p}')}.log").read_text() for p in ended}
    assert all(done.returnvalue["outcome"] == "completed" for done in ended.values()), ended
    host_kernel = subprocess.run(["uname", "-r"], capture_output=True, text=True, check=True).stdout.strip()
    assert f"kernel {host_kernel}" in said["review"], said  # Docker's default runtime: the host's kernel
    assert "kernel " in said["deploy"] and f"kernel {host_kernel}" not in said["deploy"], said  # gVisor's own
    assert row["runtimes"] == RUNSC and {"s:deploy", "s:review"} <= parse_caps(row["caps"]), row


@pytest.mark.docker
@pytest.mark.redis
@pytest.mark.slow
async def test_a_host_whose_runtime_fails_its_canary_takes_no_job_and_says_why(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis, job_image: str, docker_client: Any, queue: Queue
) -> None:
    env = worker_env(tmp_path, valkey_url, job_image, "unsandboxed", PI_JOB_RUNTIME=UNREGISTERED)
    async with running_worker(settings_of(env), beat_ms=300) as w:
        row = _row(await client.hgetall(host_row_key("unsandboxed")))
        await queue.add("github", forge_job(1), {"jobId": "gh-waits"})
        await asyncio.sleep(1.5)  # five beats: the host still takes nothing
        state = await queue.getJobState("gh-waits")
        failed = [fields for name, fields in w.events.events if name == "runtime_unavailable"]
        await queue.remove("gh-waits")  # not left for the next test's workers on this store
    assert row["unhealthy"].startswith(f"{Reason.JOB_RUNTIME_UNAVAILABLE}: PI_JOB_RUNTIME {UNREGISTERED}"), row
    assert "fix:" in row["unhealthy"] and row["runtimes"] == "", row
    assert state in ("waiting", "delayed"), state
    assert [fields["runtime"] for fields in failed] == [UNREGISTERED] and "runtime" in failed[0]["said"], failed
    assert not docker_client.containers.list(all=True, filters={"label": f"{LABEL_JOB}={CANARY_JOB}"})


@pytest.mark.docker
@pytest.mark.gvisor
async def test_a_failed_runsc_start_leaves_no_process_after_the_reap(
    docker_client: Any, job_image: str, gvisor: str
) -> None:
    runtime = ContainerRuntime(docker_client, "reaped-host", fleet="pi-test-gvisor")
    labels = {LABEL_JOB: "gh-broken", LABEL_HOST: runtime.host, LABEL_FLEET: runtime.fleet}
    container = docker_client.containers.create(
        job_image, entrypoint=["/no/such/program"], runtime=gvisor, network_mode="none",
        labels=labels | {LABEL_INSTANCE: "earlier"}, detach=True,
    )  # fmt: skip
    with pytest.raises(docker_errors.APIError, match=r"no/such/program|not found|no such file"):
        container.start()
    assert await runtime.reap() == 1  # Docker's part: the container gone
    assert not docker_client.containers.list(all=True, filters={"label": f"{LABEL_HOST}={runtime.host}"})
    reaped = run_cli("runtime-reap")  # containerd's part, as root (the worker's unit runs it before each start)
    assert reaped.returncode == 0 and "removed" in reaped.stdout, reaped.stdout + reaped.stderr
    running = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    assert container.id not in running, [line for line in running.splitlines() if container.id in line]


@pytest.mark.docker
async def test_the_canary_says_which_runtimes_run_and_why_one_does_not(docker_client: Any, job_image: str) -> None:
    runtime = ContainerRuntime(docker_client, "canary-host", fleet="pi-test-canary")
    verdicts = await asyncio.wait_for(try_runtimes(runtime, job_image, ("runc", UNREGISTERED)), CEILING_S)
    assert verdicts["runc"] is None, verdicts
    said = verdicts[UNREGISTERED]
    assert said is not None and UNREGISTERED in said and "/" not in said.replace("<path>", ""), said


def test_a_profile_whose_runtime_failed_is_neither_served_nor_run() -> None:
    secrets = SecretsGate({"deploy": "/r", "review": "/r"})
    place = JobPlace(
        secrets, {"deploy": "/r", "review": "/r"}, {}, EgressPlan(None),
        RuntimeChoice(None, frozenset({"deploy"})).with_working([]),
    )  # fmt: skip
    assert place.capabilities == {"s:review"}
    refused = place.decide({"secretsProfile": "deploy"})
    assert refused == Refusal(Reason.JOB_RUNTIME_UNAVAILABLE, "deploy")
    assert place.decide({"secretsProfile": "review"}) == (None, None)
    runs = RuntimeChoice(None, frozenset({"deploy"})).with_working([RUNSC])
    working = JobPlace(secrets, {"deploy": "/r"}, {}, EgressPlan(None), runs)
    assert working.capabilities == {"s:deploy"} and working.decide({"secretsProfile": "deploy"}) == (None, RUNSC)
