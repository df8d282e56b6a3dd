"""The rollout's health gate: each reason it holds a host back, and the commands against a real worker."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from bullmq import Queue

from pi_dispatch import __version__
from pi_dispatch.audit.rollout import LOST, Expected, verdict
from pi_dispatch.config.hostvars import PREFIX, InventoryHost, env_changes
from pi_dispatch.testing.jobs import forge_job
from tests.support.helpers import run_cli_process
from tests.support.workers import job_in_state, running_worker, settings_of, worker_env

NOW = 1_796_000_000_000
EXPECTED = Expected("mini1", "mini1", "s:prod", "true", "pi-job:latest", "1.2.3")


def healthy(**changes: Any) -> dict[str, object]:
    row: dict[str, object] = {
        "name": "mini1", "beatAt": str(NOW - 1_000), "caps": "s:prod", "routes": "true", "version": "1.2.3",
        "image": "pi-job:latest", "imageDigest": "sha256:ab", "polledAt": str(NOW - 2_000), "consumer": "ok",
    }  # fmt: skip
    return row | changes


def test_a_healthy_host_passes() -> None:
    assert verdict(EXPECTED, healthy(), {"gh-1": "known"}, NOW - 5_000, NOW) == []


@pytest.mark.parametrize(
    ("row", "states", "said"),
    [
        (None, {}, "no registry row for worker 'mini1'"),
        (healthy(beatAt=str(NOW - 60_000)), {}, "has not been beaten since the gate began"),
        (healthy(caps="s:prod,w:ci"), {}, "publishes capabilities 's:prod,w:ci'; the rollout renders 's:prod'"),
        (healthy(routes="false"), {}, "routes flag"),
        (healthy(version="1.2.2"), {}, "publishes package version '1.2.2'; the rollout renders '1.2.3'"),
        (healthy(image="other:1"), {}, "job image"),
        (healthy(imageDigest=""), {}, "is not on the host: build or pull it there"),
        (healthy(consumer="stuck"), {}, "its queue consumer is stuck"),
        (healthy(polledAt=str(NOW - 120_000)), {}, "has not polled the store recently"),
        (healthy(polledAt=""), {}, "has not polled the store recently"),
        (healthy(), {"gh-1": "known", "gh-2": LOST}, "1 jobs in flight at its stop are in no queue: gh-2"),
    ],
)
def test_each_reason_holds_the_host_back(row: dict[str, object] | None, states: dict[str, str], said: str) -> None:
    problems = verdict(EXPECTED, row, states, NOW - 5_000, NOW)
    assert len(problems) == 1
    assert said in problems[0]


def test_what_a_host_must_publish_comes_from_its_inventory() -> None:
    host = InventoryHost("mini3", {PREFIX + "secret_profiles": {"legacy": "/opt/l"}}, "inv")
    expected = Expected.of(host, None)
    assert (expected.worker, expected.caps, expected.routes, expected.version) == ("mini3", "s:legacy", "false", None)
    assert expected.image == "pi-job:latest"


def test_the_env_diff_masks_every_secret() -> None:
    old = "VALKEY_URL=redis://:old-pass@store:6379/0\nVALKEY_PASSWORD=old-secret\nPI_CONCURRENCY=2\n"
    new = "VALKEY_URL=redis://:new-pass@store:6379/0\nVALKEY_PASSWORD=new-secret\nPI_CONCURRENCY=3\nTZ=UTC\n"
    changes = env_changes(old, new)
    assert changes == [
        "-VALKEY_URL=redis://:********@store:6379/0",
        "+VALKEY_URL=redis://:********@store:6379/0",
        "-VALKEY_PASSWORD=********",
        "+VALKEY_PASSWORD=********",
        "-PI_CONCURRENCY=2",
        "+PI_CONCURRENCY=3",
        "+TZ=UTC",
    ]
    assert not any(secret in "\n".join(changes) for secret in ("old-pass", "new-pass", "old-secret", "new-secret"))
    assert env_changes(new, new) == []


def inventory(tmp: Path, image: str) -> Path:
    path = tmp / "hosts.yml"
    path.write_text(
        "pi_dispatch_workers:\n  hosts:\n"
        f"    mini1:\n      pi_dispatch_worker_name: mini1\n      pi_dispatch_worker_job_image: {image}\n"
    )
    return path


async def gate(path: Path, url: str, *extra: str) -> Any:
    """The command in a thread of its own: the worker in this process beats meanwhile."""
    args = ("rollout", "gate", "-i", str(path), "--host", "mini1", "--valkey-url", url, *extra)
    return await asyncio.to_thread(run_cli_process, *args)


@pytest.mark.redis
async def test_the_gate_says_a_host_that_never_came_back(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis
) -> None:
    result = await gate(inventory(tmp_path, "pi-job:latest"), valkey_url, "--timeout", "1")
    assert result.returncode == 1
    assert "mini1: not healthy after 1 s: no registry row for worker 'mini1'" in result.stderr


@pytest.mark.redis
@pytest.mark.docker
async def test_the_gate_passes_a_real_worker_and_catches_a_lost_job(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis, job_image: str
) -> None:
    path = inventory(tmp_path, job_image)
    env = worker_env(tmp_path, valkey_url, job_image, "mini1")
    queue = Queue("pi-jobs@mini1", {"connection": valkey_url})
    try:
        async with running_worker(settings_of(env)):
            job = await queue.add("github", forge_job(7, trigger={"demoSleep": 5}), {"jobId": "gh-long-7"})
            await job_in_state(queue, str(job.id), ("active",))
            listed = run_cli_process(
                "rollout", "in-flight", "-i", str(path), "--host", "mini1", "--valkey-url", valkey_url
            )
            assert json.loads(listed.stdout) == ["gh-long-7"]
            passed = await gate(
                path, valkey_url, "--version", __version__, "--in-flight", listed.stdout, "--timeout", "30"
            )
            assert passed.returncode == 0, passed.stderr
            assert "mini1: healthy" in passed.stdout
            lost = await gate(path, valkey_url, "--in-flight", '["gh-long-7", "gh-vanished"]', "--timeout", "2")
            assert lost.returncode == 1
            assert "in no queue: gh-vanished" in lost.stderr
            older = await gate(path, valkey_url, "--version", "0.0.1", "--timeout", "2")
            assert f"publishes package version '{__version__}'; the rollout renders '0.0.1'" in older.stderr
    finally:
        await queue.close()
