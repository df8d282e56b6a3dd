"""The limits a Python and a Node fleet share, on one real store with real workers and containers: the day's starts
counted once whoever starts them, a scope's concurrency held fleet-wide (a Node host's lease included), a scope's
day cap, the tokens a run's exit line reports, and a pause window.

The Node side is a small script of our own under node and ioredis writing the counters and leases exactly as the
reference's worker does (upstream-limits §3.1, §4.2): the reference's own modules are not published where a test can
fetch them, and its code stays out of this repository.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from bullmq import Queue

from pi_dispatch.core.budget import Window, scope_ledger, scope_slot_prefix, token_day_key, window_key
from pi_dispatch.core.keys import bull_key
from pi_dispatch.infra.valkey import fleet_id
from pi_dispatch.testing.jobs import forge_job
from pi_dispatch.worker.run.containers import LABEL_FLEET
from tests.support.helpers import run_cli, run_cli_process
from tests.support.workers import (
    CEILING_S,
    ContainerWatch,
    finished_job,
    job_in_state,
    running_worker,
    settings_of,
    worker_env,
)

pytestmark = [pytest.mark.redis, pytest.mark.docker]

# The reference's job-count reserve (INCR, the expiry set by the start that made the key, allowed while within the
# cap) for `starts` starts, and its scope lease (SET NX PX, holder `<name>#<job>`) held for `holdMs`, then released
# only while still its own.
NODE_FLEET = """
import Redis from "ioredis";
const [url, mode, key, arg, holdMs] = process.argv.slice(2);
const redis = new Redis(url);
if (mode === "starts") {
  let started = 0;
  for (let i = 0; i < Number(arg); i++) {
    const reserved = await redis.incr(key);
    if (reserved === 1) await redis.expire(key, 172800);
    if (reserved <= 5) started++;
    await new Promise((go) => setTimeout(go, 20));
  }
  process.stdout.write(String(started));
} else {
  const holder = "node1#n-1";
  const taken = await redis.set(key, holder, "PX", 2100000, "NX");
  process.stdout.write(String(taken));
  await new Promise((go) => setTimeout(go, Number(holdMs)));
  if ((await redis.get(key)) === holder) await redis.del(key);
}
redis.disconnect();
"""


@pytest.fixture
def node_fleet(tmp_path: Path, node_modules: Path) -> list[str]:
    node = shutil.which("node")
    assert node is not None
    (tmp_path / "node_modules").symlink_to(node_modules)
    (tmp_path / "fleet.mjs").write_text(NODE_FLEET)
    return [node, str(tmp_path / "fleet.mjs")]


def today_ms() -> int:
    return int(time.time() * 1000)


def record(logs_dir: Path, job_id: str) -> Any:
    return json.loads((logs_dir / f"{job_id}.json").read_text())


async def add(queue: Queue, job_id: str, number: int, **trigger: Any) -> None:
    await queue.add("github", forge_job(number, trigger=trigger), {"jobId": job_id, "attempts": 1})


@pytest.mark.node
async def test_a_fleet_wide_daily_cap_counts_every_start_once_node_and_python_alike(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis, job_image: str, queue: Queue, node_fleet: list[str]
) -> None:
    day = window_key("budget", Window.DAY, today_ms())
    caps = {"PI_DAILY_CAP": "5", "PI_CONCURRENCY": "2"}
    settings = [settings_of(worker_env(tmp_path, valkey_url, job_image, name, **caps)) for name in ("py1", "py2")]
    ids = [f"cap-{index}" for index in range(6)]
    async with running_worker(settings[0]) as one, running_worker(settings[1]) as two:
        node = await asyncio.create_subprocess_exec(
            *node_fleet, valkey_url, "starts", day, "4", "0", stdout=asyncio.subprocess.PIPE
        )  # fmt: skip
        for number, job_id in enumerate(ids):
            await add(queue, job_id, number, demoSleep=0)
        node_out, _ = await asyncio.wait_for(node.communicate(), CEILING_S)
        for job_id in ids:
            await finished_job(queue, job_id)
    records = [record(one.logs_dir, job_id) if (one.logs_dir / f"{job_id}.json").exists()
               else record(two.logs_dir, job_id) for job_id in ids]  # fmt: skip
    ran = [entry for entry in records if entry["outcome"] == "completed"]
    refused = [entry for entry in records if entry["outcome"] == "policy"]
    assert int(node_out) + len(ran) == 5, (node_out, records)  # exactly five starts that day, across both kinds
    assert {entry["reason"] for entry in refused} <= {"over-budget"} and len(ran) + len(refused) == 6
    assert all(entry["budgetReserved"] is True for entry in records)  # a refusal keeps its count, as Node's
    assert await client.get(day) == b"10" and 0 < await client.ttl(day) <= 172_800


@pytest.mark.node
async def test_a_scope_of_concurrent_1_runs_one_container_at_a_time_across_hosts_and_defers_the_rest(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis, job_image: str, queue: Queue, node_fleet: list[str],
    docker_client: Any,
) -> None:  # fmt: skip
    limits = tmp_path / "scoped-limits.json"
    limits.write_text(json.dumps({"version": 1, "limits": [{"scope": "acme/app", "concurrent": 1}]}))
    env = {"PI_SCOPED_LIMITS_FILE": str(limits), "PI_CONCURRENCY": "2"}
    settings = [settings_of(worker_env(tmp_path, valkey_url, job_image, name, **env)) for name in ("py1", "py2")]
    slot = f"{scope_slot_prefix('acme/app')}0"
    # a Node host holds the scope's one slot for 2 s: no Python host may start one of its jobs meanwhile
    node = await asyncio.create_subprocess_exec(*node_fleet, valkey_url, "lease", slot, "", "2000",
                                                stdout=asyncio.subprocess.PIPE)  # fmt: skip
    while await client.get(slot) != b"node1#n-1":
        await asyncio.sleep(0.02)
    ids = [f"scope-{index}" for index in range(4)]
    with ContainerWatch(docker_client, "", label=f"{LABEL_FLEET}={fleet_id(valkey_url)}") as watch:
        async with running_worker(settings[0]) as one, running_worker(settings[1]) as two:
            for number, job_id in enumerate(ids):
                await add(queue, job_id, number, demoSleep=1)
            await asyncio.wait_for(node.communicate(), CEILING_S)
            jobs = [await finished_job(queue, job_id) for job_id in ids]
    assert [job.returnvalue["outcome"] for job in jobs] == ["completed"] * 4  # deferred, never refused
    assert watch.most == 1 and len(watch.seen) == 4, (watch.most, watch.seen)
    deferred = [event for run in (one, two) for name, event in run.events.events if name == "scope_busy_deferred"]
    assert any(event.get("where") == "fleet" for event in deferred), deferred
    assert await client.exists(slot) == 0  # each holder released its own


async def test_a_scopes_day_cap_refuses_the_fourth_as_scope_cap(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis, job_image: str, queue: Queue
) -> None:
    limits = tmp_path / "scoped-limits.json"
    limits.write_text(json.dumps({"version": 1, "limits": [{"scope": "acme/app", "day": 3}]}))
    env = worker_env(tmp_path, valkey_url, job_image, "py1", PI_SCOPED_LIMITS_FILE=str(limits), PI_CONCURRENCY="1")
    ids = [f"day-{index}" for index in range(4)]
    async with running_worker(settings_of(env)) as one:
        for number, job_id in enumerate(ids):
            await add(queue, job_id, number)
            await finished_job(queue, job_id)
    records = [record(one.logs_dir, job_id) for job_id in ids]
    assert [(entry["outcome"], entry["reason"]) for entry in records] == [("completed", None)] * 3 + [
        ("policy", "scope-cap")
    ]
    assert records[3]["budgetReserved"] is False
    now = today_ms()
    assert await client.get(window_key(scope_ledger("acme/app"), Window.DAY, now)) == b"4"
    assert await client.get(window_key("budget", Window.DAY, now)) == b"3"  # the fleet's ledger never saw the 4th
    over = [event for name, event in one.events.events if name == "over_scope_budget"]
    assert over and "acme/app" not in json.dumps(over)  # the scope is named by its key, never by itself


async def test_a_runs_exit_line_lands_in_its_record_and_the_days_tokens_cap_the_next(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis, job_image: str, queue: Queue
) -> None:
    env = worker_env(tmp_path, valkey_url, job_image, "py1", PI_DAILY_TOKEN_CAP="1000", PI_CONCURRENCY="1")
    async with running_worker(settings_of(env)) as one:
        for number, job_id in enumerate(("tok-1", "tok-2", "tok-3")):
            await add(queue, job_id, number, demoUsage=600)
            await finished_job(queue, job_id)
    first = record(one.logs_dir, "tok-1")
    said = {key: first["tokens"].get(key) for key in ("input", "output", "total", "cost", "metered", "unpriced")}
    assert first["turns"] == 3 and said == {
        "input": 450, "output": 150, "total": 600, "cost": 0.0123, "metered": True, "unpriced": 0
    }  # fmt: skip
    assert first["context"] == {"tokens": 600, "window": 200000} and first["budgetReserved"] is True
    assert record(one.logs_dir, "tok-2")["outcome"] == "completed"  # 600 spent: under the cap when it started
    third = record(one.logs_dir, "tok-3")
    assert (third["outcome"], third["reason"], third["tokens"]) == ("policy", "daily-token-cap", None)
    assert await client.get(token_day_key(today_ms())) == b"1200"
    runs = await asyncio.to_thread(run_cli_process, "runs", "--valkey-url", valkey_url, "--logs-dir", str(one.logs_dir))
    assert runs.stdout.count("3 turns · 600 tokens · $0.0123") == 2, runs.stdout  # the third never ran


async def test_a_job_inside_a_pause_window_waits_unrecorded_and_runs_once_the_window_is_gone(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis, job_image: str, queue: Queue
) -> None:
    now = datetime.now(UTC)
    start, end = (now - timedelta(hours=1)).strftime("%H:%M"), (now + timedelta(hours=1)).strftime("%H:%M")
    pauses = tmp_path / "pause-windows.json"
    pauses.write_text(json.dumps({"windows": [{"scope": "acme/app", "from": start, "to": end}]}))
    env = worker_env(tmp_path, valkey_url, job_image, "py1", PI_PAUSE_WINDOWS_FILE=str(pauses))
    async with running_worker(settings_of(env)) as one:
        await add(queue, "gh-paused", 1)
        await job_in_state(queue, "gh-paused", ("delayed",))
        score = await client.zscore(bull_key("pi-jobs", "delayed"), "gh-paused")  # BullMQ: when * 4096 + a counter
        assert score is not None and int(score) // 4096 >= int((now + timedelta(minutes=58)).timestamp() * 1000)
        assert not (one.logs_dir / "gh-paused.json").exists()
        said = await asyncio.to_thread(run_cli, "job", "gh-paused", "--valkey-url", valkey_url)
        assert said.returncode == 0 and "waits for a pause window" in said.stdout, said.stdout + said.stderr
        assert await client.exists(window_key("budget", Window.DAY, today_ms())) == 0  # nothing counted
        reloads = one.events.names().count("pause_windows_reloaded")  # the watch reads the file once when armed
        pauses.write_text(json.dumps({"windows": []}))  # the window removed: read again while the worker runs
        deadline = time.monotonic() + CEILING_S
        while one.events.names().count("pause_windows_reloaded") == reloads:
            assert time.monotonic() < deadline, "the pause windows were not read again"
            await asyncio.sleep(0.05)
        await (await queue.getJob("gh-paused")).promote()
        assert (await finished_job(queue, "gh-paused")).returnvalue["outcome"] == "completed"


async def test_a_start_whose_container_never_ran_is_given_back(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis, job_image: str, queue: Queue
) -> None:
    missing = "pi-dispatch-missing:never"  # allowed, but on no host: the container is never created
    env = worker_env(tmp_path, valkey_url, job_image, "py1", PI_ALLOWED_IMAGES=missing, PI_DAILY_CAP="5")
    async with running_worker(settings_of(env)) as one:
        await queue.add("github", forge_job(1, image=missing), {"jobId": "gh-never", "attempts": 1})
        await queue.add("github", forge_job(2), {"jobId": "gh-ran", "attempts": 1})
        never, ran = await finished_job(queue, "gh-never"), await finished_job(queue, "gh-ran")
    assert never.failedReason and ran.returnvalue["outcome"] == "completed"
    assert record(one.logs_dir, "gh-never")["reason"] == "job-image-missing"
    assert await client.get(window_key("budget", Window.DAY, today_ms())) == b"1"  # only the start that ran counts
