"""This host's clock against a real redis-server's: the offset measured with TIME, the corrected clock, and a
worker whose clock runs 90 s ahead taking no job and re-homing nothing until it is back."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from bullmq import Queue

from pi_dispatch.core.keys import host_row_key
from pi_dispatch.infra.clock import wall_ms
from pi_dispatch.infra.events import Recorder
from pi_dispatch.testing.jobs import forge_job
from pi_dispatch.worker.host.clockwatch import ClockWatch, offset_of
from tests.support.workers import finished_job, running_worker, settings_of, worker_env

pytestmark = pytest.mark.redis
AHEAD_MS = 90_000


def test_the_offset_is_the_stores_time_less_the_midpoint_of_the_ask() -> None:
    assert offset_of(1_000, [b"2", b"500000"], 1_200) == 2_500 - 1_100
    assert offset_of(1_000, "nonsense", 1_200) is None and offset_of(1_000, [b"x", b"1"], 1_200) is None


async def test_a_clock_90_s_ahead_is_measured_corrected_and_said_once(client: aioredis.Redis) -> None:
    shift = [AHEAD_MS]
    events = Recorder()
    clock = ClockWatch(5_000, events, local=lambda: wall_ms() + shift[0])
    await clock.measure(client)
    assert abs(clock.offset_ms + AHEAD_MS) < 1_000 and clock.skewed
    assert abs(clock.now() - wall_ms()) < 1_000  # corrected: the store's time, not this host's
    assert clock.row_facts() == {"clockOffsetMs": str(clock.offset_ms)}
    await clock.measure(client)
    shift[0] = 0
    await clock.measure(client)
    assert not clock.skewed
    assert [event for event, _ in events.events] == ["clock_skew", "clock_skew_ended"]


@pytest.mark.docker
async def test_a_worker_whose_clock_runs_ahead_takes_no_job_until_it_is_back(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis, job_image: str
) -> None:
    shift = [AHEAD_MS]
    env = worker_env(tmp_path, valkey_url, job_image, "skewed")
    queue = Queue("pi-jobs", {"connection": valkey_url})
    try:
        options = {"beat_ms": 300, "now": lambda: wall_ms() + shift[0]}
        async with running_worker(settings_of(env), **options) as w:
            await queue.add("github", forge_job(1), {"jobId": "gh-skewed"})
            await asyncio.sleep(2)
            assert await queue.getJobState("gh-skewed") == "waiting"  # not taken while the clock is off
            assert w.worker.rehomer.paused()
            offset = int((await client.hget(host_row_key("skewed"), "clockOffsetMs")) or 0)
            assert abs(offset + AHEAD_MS) < 1_000
            beat_at = int(await client.hget(host_row_key("skewed"), "beatAt") or 0)
            assert abs(beat_at - wall_ms()) < 5_000  # beats on the store's clock, not 90 s in the future
            shift[0] = 0  # synced again: the next beat measures it and the job runs
            done = await finished_job(queue, "gh-skewed")
            assert done.returnvalue["outcome"] == "completed"
        assert "clock_skew" in w.events.names() and "clock_skew_ended" in w.events.names()
    finally:
        await queue.close()
