"""A host that cannot run jobs, against a real redis-server, real Docker and a real read-only mount: the job goes
back without spending an attempt, the host says why and takes nothing, and it resumes once its probe finds the
cause gone."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from bullmq import Queue

from pi_dispatch.core.capabilities import out_of_service, serving_caps, unhealthy_reason
from pi_dispatch.core.keys import host_row_key
from pi_dispatch.testing.jobs import forge_job
from tests.support.workers import finished_job, running_worker, settings_of, worker_env

pytestmark = [pytest.mark.redis, pytest.mark.docker]


@pytest.fixture
def read_only_folder(tmp_path: Path) -> Iterator[Path]:
    """A folder even root cannot write to (a read-only tmpfs), made writable again with `remount`."""
    folder = tmp_path / "jobs"
    folder.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("mount is needed for a read-only folder root cannot write through")
    mount = ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)]
    done = subprocess.run(mount, check=False, capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def test_an_unhealthy_row_serves_nothing_and_says_why() -> None:
    row = {"name": "mini1", "caps": "s:prod", "unhealthy": "PI_JOBS_DIR is not writable (EROFS)", "staleMs": 0}
    assert out_of_service(row) and serving_caps(row) == set()
    assert unhealthy_reason(row) == "PI_JOBS_DIR is not writable (EROFS)"
    assert not out_of_service({**row, "unhealthy": ""}) and serving_caps({**row, "unhealthy": ""}) == {"s:prod"}


async def test_a_read_only_jobs_dir_puts_the_job_back_unspent_until_the_host_is_healthy(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis, job_image: str, read_only_folder: Path
) -> None:
    env = worker_env(tmp_path, valkey_url, job_image, "sick", PI_JOBS_DIR=str(read_only_folder))
    queue = Queue("pi-jobs", {"connection": valkey_url})
    try:
        async with running_worker(settings_of(env), beat_ms=300) as w:
            await queue.add("github", forge_job(1), {"jobId": "gh-sick"})
            deadline = asyncio.get_running_loop().time() + 30
            while "host_unhealthy" not in w.events.names() and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.1)
            await asyncio.sleep(1)
            row = await client.hget(host_row_key("sick"), "unhealthy")
            assert row == b"PI_JOBS_DIR is not writable (EROFS)"  # the setting and the errno, never the path
            held = await queue.getJob("gh-sick")
            assert held.attemptsMade == 0 and await queue.getJobState("gh-sick") in ("waiting", "delayed")
            subprocess.run(["mount", "-o", "remount,rw", str(read_only_folder)], check=True)
            done = await finished_job(queue, "gh-sick")
        assert done.returnvalue["outcome"] == "completed" and done.attemptsMade == 1
        assert "host_healthy" in w.events.names()
        assert [f for e, f in w.events.events if e == "host_unhealthy"] == [
            {"reason": "PI_JOBS_DIR is not writable (EROFS)"}
        ]
    finally:
        await queue.close()


async def test_a_container_the_daemon_refuses_for_the_jobs_own_sake_fails_the_job_not_the_host(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis, job_image: str
) -> None:
    env = worker_env(tmp_path, valkey_url, job_image, "fine")
    queue = Queue("pi-jobs", {"connection": valkey_url})
    try:
        async with running_worker(settings_of(env), beat_ms=300) as w:
            # a NUL in a field the container's environment carries: Docker refuses to create it, and answers pings
            await queue.add("github", {**forge_job(1), "kind": "nul\x00byte"}, {"jobId": "gh-nul", "attempts": 1})
            done = await finished_job(queue, "gh-nul")
        assert done.attemptsMade == 1 and await queue.getJobState("gh-nul") == "failed"
        assert "host_unhealthy" not in w.events.names()
    finally:
        await queue.close()
