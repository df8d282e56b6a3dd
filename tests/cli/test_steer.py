"""`cancel`, `retry`, `drain` and `resume` from the command line, against a real redis-server and real BullMQ."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from pi_dispatch.core.capabilities import is_draining
from pi_dispatch.core.routing import explain_route
from pi_dispatch.fleet.control import Drain, read_drain, request_drain
from pi_dispatch.fleet.enqueue import ForgeRouter, forge_job_options, registry_reader
from pi_dispatch.fleet.registry import HostRegistry
from pi_dispatch.fleet.snapshot import FleetView, fleet_view, read_drained
from pi_dispatch.testing.jobs import forge_job
from tests.support.helpers import run_cli, run_cli_process
from tests.support.workers import open_queues

pytestmark = [pytest.mark.redis]


async def test_retry_failed_runs_every_cancelled_job_again(client: aioredis.Redis, valkey_url: str) -> None:
    async with open_queues(valkey_url, ["pi-jobs"]) as queues:
        ids = []
        for number in (1, 2):
            data = forge_job(number)
            options = {k: v for k, v in forge_job_options("github", data).items() if k != "deduplication"}
            ids.append(str((await queues["pi-jobs"].add("github", data, options)).id))
    for job_id in ids:
        done = await asyncio.to_thread(run_cli, "cancel", job_id, "--valkey-url", valkey_url)
        assert done.returncode == 0 and f"cancelled {job_id}" in done.stdout
    retried = await asyncio.to_thread(run_cli, "retry", "--failed", "--json", "--valkey-url", valkey_url)
    assert retried.returncode == 0, retried.stderr
    assert json.loads(retried.stdout) == [{"jobId": job_id, "result": "queued", "queue": "pi-jobs"} for job_id in ids]
    assert await client.llen("bull:pi-jobs:wait") == 2


async def test_bad_input_is_one_line_and_exit_2(valkey_url: str) -> None:
    both = await asyncio.to_thread(run_cli, "retry", "gh-1", "--failed", "--valkey-url", valkey_url)
    assert both.returncode == 2 and "not both" in both.stderr and "Traceback" not in both.stderr
    for age in ("yesterday", "²h", "٣h", "-2h"):  # a superscript and an Arabic-Indic digit pass str.isdigit()
        since = await asyncio.to_thread(run_cli, "retry", "--failed", "--since", age, "--valkey-url", valkey_url)
        assert since.returncode == 2 and "--since" in since.stderr and "Traceback" not in since.stderr, age
    name = await asyncio.to_thread(run_cli, "drain", "../etc", "--valkey-url", valkey_url)
    assert name.returncode == 2 and "not a worker name" in name.stderr


async def test_a_drain_of_a_host_not_running_is_recorded_for_when_it_starts(
    client: aioredis.Redis, valkey_url: str
) -> None:
    drained = await asyncio.to_thread(run_cli, "drain", "mini9", "--deadline", "60", "--valkey-url", valkey_url)
    assert drained.returncode == 0 and "applies when one starts" in drained.stdout
    fact = await read_drain(client, "mini9")
    assert fact is not None and fact.deadline_ms is not None and fact.deadline_ms - fact.since_ms == 60_000
    resumed = await asyncio.to_thread(run_cli, "resume", "mini9", "--valkey-url", valkey_url)
    assert resumed.returncode == 0 and await read_drain(client, "mini9") is None


def _hashed_to(host: str, rows: list[dict[str, object]], start: int) -> dict[str, object]:
    """A forge job needing s:x whose id the router hashes to `host` among the rows."""
    for number in range(start, start + 200):
        job = forge_job(number, secretsProfile="x")
        if explain_route(rows, job, str(forge_job_options("github", job)["jobId"])).host == host:
            return job
    raise AssertionError(f"no job id among 200 hashes to {host}")


async def test_a_drain_and_a_resume_reach_routing_at_once(
    client: aioredis.Redis, valkey_url: str, tmp_path: Path
) -> None:
    """Rows that still say nothing of the drain (their hosts' next beat is far off) and a fresh snapshot: a separate
    `enqueue` process routes around a drained host as soon as the drain is recorded, and to it again once resumed;
    a receiver's router within its one-second drain read."""
    hosts = [HostRegistry(client, name) for name in ("ja", "jb", "jc", "jd")]
    for host in hosts:  # jd lacks the profile: a job that needs it is routed among the others
        caps = "" if host.name == "jd" else "s:x"
        await host.start({"routes": "true", "caps": caps, "version": "0.1.0", "tz": "UTC"})
    view = await fleet_view(client)  # published: every reader now reads this snapshot for a beat
    assert isinstance(view, FleetView) and view.direct
    rows = view.live.hosts
    ticks = [0.0]
    router = ForgeRouter(registry_reader(client), clock=lambda: ticks[0], read_drains=lambda: read_drained(client))
    job_file = tmp_path / "job.json"

    async def enqueued(job: dict[str, object]) -> str:
        job_file.write_text(json.dumps(job))
        done = await asyncio.to_thread(run_cli_process, "enqueue", "--job", str(job_file), "--json",
                                       "--valkey-url", valkey_url)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return str(json.loads(done.stdout)["queue"])

    first = _hashed_to("jb", rows, 1)
    assert await router.queue_for("github", first) == "pi-jobs@jb"
    await request_drain(client, "jb", Drain(int(time.time() * 1000)))
    assert await enqueued(_hashed_to("jb", rows, 300)) in ("pi-jobs@ja", "pi-jobs@jc")  # at once, no beat later
    seen = await fleet_view(client)  # what a worker's beat, `route` and a re-home read: the snapshot, drain applied
    assert isinstance(seen, FleetView) and not seen.direct
    assert [is_draining(row) for row in seen.live.hosts if row["name"] in ("ja", "jb")] == [False, True]
    ticks[0] += 1.0  # the router's drain read is due again
    assert await router.queue_for("github", first) in ("pi-jobs@ja", "pi-jobs@jc")
    await request_drain(client, "jb", None)
    assert await enqueued(_hashed_to("jb", rows, 600)) == "pi-jobs@jb"
    ticks[0] += 1.0
    assert await router.queue_for("github", first) == "pi-jobs@jb"
    assert await read_drained(client) == frozenset()
    for host in hosts:
        await host.close()
