"""Dollars a Python and a Node fleet share, on one real store with real workers and containers: a day's dollar
window filled by holds whoever takes them, a run settled to its metered cost only when its exit line is trusted (the
example image signs it with the key the worker hands it on stdin), and a hold a SIGKILLed worker left open settled.

The Node side is a small script of our own under node and ioredis holding dollars exactly as upstream-limits §3.6
describes (INCRBY the cap, the expiry set by the hold that made the key, everything given back past the cap).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from bullmq import Queue

from pi_dispatch.core.budget import Window, window_key
from pi_dispatch.core.dollarplan import EMPTY_USD_FINGERPRINT, FPUSD_ROW_FIELD, USD_PREFIX, usd_model_prefix
from pi_dispatch.core.keys import host_row_key
from pi_dispatch.fleet.dollars import OPEN_HOLD_DATA, OPEN_HOLDS
from pi_dispatch.testing.jobs import forge_job
from tests.support.helpers import run_cli, run_cli_process
from tests.support.workers import (
    finished_job,
    job_in_state,
    running_worker,
    settings_of,
    start_worker_process,
    wait_for_line,
    worker_env,
)

pytestmark = [pytest.mark.redis, pytest.mark.docker]
USD = 1_000_000
NODE_HOLD = """
import Redis from "ioredis";
const [url, key, amount, cap] = process.argv.slice(2);
const redis = new Redis(url);
const held = await redis.incrby(key, Number(amount));
if (held === Number(amount)) await redis.expire(key, 172800);
if (held > Number(cap)) await redis.decrby(key, Number(amount));
process.stdout.write(held > Number(cap) ? "refused" : "held");
redis.disconnect();
"""


def now_ms() -> int:
    return int(time.time() * 1000)


def record(logs_dir: Path, job_id: str) -> Any:
    return json.loads((logs_dir / f"{job_id}.json").read_text())


async def add(queue: Queue, job_id: str, number: int, **trigger: Any) -> None:
    fields = {name: trigger.pop(name) for name in ("maxCostUsd", "models") if name in trigger}  # the rule's
    await queue.add("github", forge_job(number, trigger=trigger, **fields), {"jobId": job_id, "attempts": 1})


@pytest.mark.node
async def test_a_dollar_day_of_1_usd_starts_exactly_four_25c_jobs_across_the_fleet(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis, job_image: str, queue: Queue, node_modules: Path
) -> None:
    day = window_key(USD_PREFIX, Window.DAY, now_ms())
    (tmp_path / "node_modules").symlink_to(node_modules)
    (tmp_path / "hold.mjs").write_text(NODE_HOLD)
    node = shutil.which("node")
    assert node is not None
    held = await asyncio.create_subprocess_exec(node, str(tmp_path / "hold.mjs"), valkey_url, day, str(USD // 4),
                                                str(USD), stdout=asyncio.subprocess.PIPE)  # fmt: skip
    assert (await held.communicate())[0] == b"held"  # a Node host's job holds the first quarter
    caps = {"PI_MAX_COST_USD": "0.25", "PI_DAILY_COST_USD": "1.00", "PI_CONCURRENCY": "2", "PI_DAILY_CAP": "100"}
    settings = [settings_of(worker_env(tmp_path, valkey_url, job_image, name, **caps)) for name in ("py1", "py2")]
    ids = [f"usd-{index}" for index in range(5)]
    async with running_worker(settings[0]) as one, running_worker(settings[1]) as two:
        for number, job_id in enumerate(ids):
            await add(queue, job_id, number)  # no exit line: each run settles at the floor, its whole hold
        for job_id in ids:
            await finished_job(queue, job_id)
        rows = [await client.hget(host_row_key(name), FPUSD_ROW_FIELD) for name in ("py1", "py2")]
    assert rows[0] == rows[1] and rows[0] not in (None, EMPTY_USD_FINGERPRINT.encode())  # both say the same caps
    records = [record(one.logs_dir, job_id) if (one.logs_dir / f"{job_id}.json").exists()
               else record(two.logs_dir, job_id) for job_id in ids]  # fmt: skip
    ran = [entry for entry in records if entry["outcome"] == "completed"]
    refused = [entry for entry in records if entry["outcome"] == "policy"]
    assert len(ran) == 3 and len(refused) == 2, records  # with Node's one: exactly four starts in the day's dollars
    assert all(entry["dollars"] == {"reservedMicros": 250_000, "settledMicros": 250_000, "basis": "floor",
                                    "modelBasis": None} for entry in ran)  # fmt: skip
    assert all(
        entry["reason"] == "dollar-cap"
        and entry["budgetReserved"] is False
        and entry["dollars"] == {"reservedMicros": 250_000, "settledMicros": 0, "basis": "refunded", "modelBasis": None}
        for entry in refused
    )
    assert await client.get(day) == str(USD).encode()  # every refused hold given back whole
    assert await client.get(window_key("budget", Window.DAY, now_ms())) == b"3"  # and its start
    assert await client.exists(OPEN_HOLDS, OPEN_HOLD_DATA) == 0  # every hold settled


async def test_a_trusted_run_settles_its_metered_cost_and_an_untrusted_one_the_floor(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis, job_image: str, queue: Queue
) -> None:
    limits = tmp_path / "scoped-limits.json"
    limits.write_text(json.dumps({"version": 2, "limits": [{"scope": "model:demo/demo-1", "dayUsd": "50"}]}))
    env = worker_env(tmp_path, valkey_url, job_image, "py1", PI_MAX_COST_USD="1", PI_DAILY_COST_USD="100",
                     PI_SCOPED_LIMITS_FILE=str(limits), PI_CONCURRENCY="1")  # fmt: skip
    runs = {
        "metered": {"demoUsage": 1000, "demoCost": 250_000},
        "no-line": {},
        "unsigned": {"demoUsage": 1000, "demoCost": 1, "demoForge": 1},
        "forged": {"demoUsage": 1000, "demoCost": 1, "demoForge": 2},
        "other-code": {"demoUsage": 1000, "demoCost": 1, "demoLineCode": 1},
        "narrowed": {"demoUsage": 1000, "demoCost": 100_000, "maxCostUsd": "0.5"},
    }
    async with running_worker(settings_of(env)) as one:
        for number, (job_id, trigger) in enumerate(runs.items()):
            await add(queue, job_id, number, **trigger)
            await finished_job(queue, job_id)
    dollars = {job_id: record(one.logs_dir, job_id)["dollars"] for job_id in runs}
    assert dollars["metered"] == {"reservedMicros": USD, "settledMicros": 250_000, "basis": "metered",
                                  "modelBasis": "metered"}  # fmt: skip
    for untrusted in ("no-line", "unsigned", "forged", "other-code"):
        assert dollars[untrusted] == {"reservedMicros": USD, "settledMicros": USD, "basis": "floor",
                                      "modelBasis": "floor"}, untrusted  # fmt: skip
    assert dollars["narrowed"]["reservedMicros"] == 500_000 and dollars["narrowed"]["settledMicros"] == 100_000
    day = int(await client.get(window_key(USD_PREFIX, Window.DAY, now_ms())) or 0)
    assert day == 250_000 + 4 * USD + 100_000  # the metered runs freed the rest of their holds
    model_day = window_key(usd_model_prefix("demo/demo-1"), Window.DAY, now_ms())
    assert int(await client.get(model_day) or 0) == 250_000 + 4 * USD + 100_000
    report = await asyncio.to_thread(run_cli_process, "runs", "--since", "7d", "--json", "--valkey-url", valkey_url,
                                     "--logs-dir", str(one.logs_dir))  # fmt: skip
    runs_said = {run["jobId"]: run["dollars"] for run in json.loads(report.stdout)["runs"]}
    assert runs_said == dollars  # a week's cost report: each run's dollars, as recorded
    future = await asyncio.to_thread(run_cli_process, "runs", "--since", "2999-01-01T00:00:00+00:00", "--json",
                                     "--valkey-url", valkey_url, "--logs-dir", str(one.logs_dir))  # fmt: skip
    assert json.loads(future.stdout)["runs"] == []
    table = await asyncio.to_thread(run_cli_process, "runs", "--valkey-url", valkey_url, "--logs-dir",
                                    str(one.logs_dir))  # fmt: skip
    assert "charged $0.25 of $1.00 held (metered)" in table.stdout and "(floor)" in table.stdout, table.stdout
    settled = [event for name, event in one.events.events if name == "dollar_settled"]
    assert len(settled) == 6 and {event["exitAuth"] for event in settled} == {"verified", "unverified"}
    assert all(len(event.get("jobId", "")) < 40 for event in settled)
    assert not any(len(str(value)) == 64 for event in settled for value in event.values())  # no key in a log


@pytest.mark.slow
async def test_a_hold_a_sigkilled_worker_left_open_is_settled_at_the_floor_when_it_comes_back(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis, job_image: str, queue: Queue
) -> None:
    env = worker_env(tmp_path, valkey_url, job_image, "victim", PI_MAX_COST_USD="0.5", PI_DAILY_COST_USD="10",
                     PI_CONCURRENCY="1")  # fmt: skip
    log = tmp_path / "victim.log"
    victim = start_worker_process(env, log)
    try:
        await wait_for_line(log, "worker_started")
        await add(queue, "gh-killed", 1, demoSleep=30)
        await job_in_state(queue, "gh-killed", ("active",))
        deadline = time.monotonic() + 60
        while not await client.zcard(OPEN_HOLDS):  # held just before its container starts
            assert time.monotonic() < deadline, "no hold was taken"
            await asyncio.sleep(0.05)
        (hold_id,) = [member.decode() for member in await client.zrange(OPEN_HOLDS, 0, -1)]
        lease_ends = await client.zscore(OPEN_HOLDS, hold_id)
        assert hold_id.startswith("victim#gh-killed#") and lease_ends is not None and lease_ends > now_ms()
        victim.send_signal(signal.SIGKILL)
        victim.wait()
    finally:
        if victim.poll() is None:
            victim.kill()
    day = window_key(USD_PREFIX, Window.DAY, now_ms())
    assert await client.get(day) == b"500000" and await client.zcard(OPEN_HOLDS) == 1  # open, its worker dead
    async with running_worker(settings_of(env)) as back:  # the same host back: its dead run's hold is its own
        deadline = time.monotonic() + 60
        while await client.zcard(OPEN_HOLDS):
            assert time.monotonic() < deadline, "the dead run's hold was not settled"
            await asyncio.sleep(0.05)
        swept = [event for name, event in back.events.events if name == "dollar_hold_swept"]
        assert swept[0]["hold"] == hold_id and swept[0]["basis"] == "floor"
        assert now_ms() < lease_ends  # well within its lease
        await finished_job(queue, "gh-killed", timeout_s=120)  # its next attempt runs (and holds) again
    assert await client.hexists(OPEN_HOLD_DATA, hold_id) == 0
    assert int(await client.get(day) or 0) >= 500_000  # the dead run's hold kept: the floor


def test_runs_since_refuses_what_is_not_a_time() -> None:
    said = run_cli("runs", "--since", "last tuesday", "--valkey-url", "redis://127.0.0.1:1/0")
    assert said.returncode == 2 and "--since" in said.stderr and "Traceback" not in said.stderr


async def test_an_image_without_exit_auth_is_charged_its_hold_and_its_share_of_the_days_tokens(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis, job_image: str, queue: Queue, docker_client: Any
) -> None:
    """Issue 53 (M3, L1): a job whose image does not sign its exit line says it cost $0 and used 10 tokens: its
    dollars settle at the floor (the whole hold), and the day's token counter takes its share of the day at least
    (1,000,000 tokens over 500 starts: 2,000), never what the line claimed."""
    import io

    unsigned = "pi-dispatch-test-unsigned:latest"
    dockerfile = f'FROM {job_image}\nLABEL dev.pi-dispatch.capabilities="costCap"\n'
    await asyncio.to_thread(docker_client.images.build, fileobj=io.BytesIO(dockerfile.encode()), tag=unsigned, rm=True)
    caps = {"PI_MAX_COST_USD": "1", "PI_DAILY_COST_USD": "100", "PI_DAILY_TOKEN_CAP": "1000000", "PI_DAILY_CAP": "500"}
    env = worker_env(tmp_path, valkey_url, unsigned, "py1", PI_CONCURRENCY="1", **caps)
    try:
        async with running_worker(settings_of(env)) as one:
            await add(queue, "claims-nothing", 1, demoUsage=10, demoCost=0)
            await finished_job(queue, "claims-nothing")
    finally:
        await asyncio.to_thread(docker_client.images.remove, unsigned)
    said = record(one.logs_dir, "claims-nothing")
    assert said["outcome"] == "completed" and said["tokens"]["total"] == 10  # what the line said is recorded
    assert said["dollars"] == {"reservedMicros": USD, "settledMicros": USD, "basis": "floor", "modelBasis": None}
    assert int(await client.get(window_key(USD_PREFIX, Window.DAY, now_ms())) or 0) == USD
    from pi_dispatch.core.budget import token_day_key

    assert await client.get(token_day_key(now_ms())) == b"2000"
