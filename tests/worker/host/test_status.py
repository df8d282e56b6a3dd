"""The worker's STATUS= line, as `systemctl status` shows it: slots in use, the last job and how it ended, the
store's state and a drain; sent each beat to a real notify socket by a real worker."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest
from bullmq import Queue

from pi_dispatch.testing.jobs import forge_job
from pi_dispatch.worker.host.status import StatusLine
from tests.support.workers import finished_job, running_worker, settings_of, worker_env


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_line_says_slots_the_last_job_the_store_and_a_drain() -> None:
    clock, told = Clock(), []
    status = StatusLine(clock)
    log = status.observe(lambda event, fields: told.append(event))
    assert status.line(0, 2, 0, False) == "0/2 slots in use; no job yet; store ok"
    log("job_done", {"jobId": "gh-1", "outcome": "completed"})
    clock.now += 12
    assert status.line(1, 2, 0, False) == "1/2 slots in use; last job gh-1 completed 12 s ago; store ok"
    log("job_failed", {"jobId": "gh-2", "reason": "container-failed"})
    assert status.line(0, 2, 31.5, True) == (
        "0/2 slots in use; last job gh-2 failed 0 s ago; store unreachable for 31 s; draining"
    )
    assert told == ["job_done", "job_failed"]  # every event still reaches the log


@pytest.mark.docker
@pytest.mark.redis
async def test_a_worker_tells_systemd_its_status_each_beat(
    tmp_path: Path, valkey_url: str, job_image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = str(tmp_path / "notify")
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    env = worker_env(tmp_path, valkey_url, job_image, "mini1")
    queue = Queue("pi-jobs@mini1", {"connection": valkey_url})
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as receiver:
        receiver.bind(path)
        receiver.setblocking(False)
        try:
            async with running_worker(settings_of(env), beat_ms=200):
                await queue.add("github", forge_job(1), {"jobId": "gh-status"})
                await finished_job(queue, "gh-status")
                heard: list[bytes] = []
                for _ in range(50):
                    try:
                        heard.append(receiver.recv(512))
                    except BlockingIOError:
                        await asyncio.sleep(0.1)
                    if any(b"last job gh-status completed" in message for message in heard):
                        break
        finally:
            await queue.close()
    said = [message.decode() for message in heard if message.startswith(b"STATUS=")]
    assert any("last job gh-status completed" in line and "store ok" in line for line in said), heard
