"""A Node fleet and this one on the same Valkey: the seed's own run-mirror.mjs under node, through ioredis.

Python writes and the seed reads, the seed writes and Python reads, and the same record written by both
is stored byte for byte the same. Fails, saying why, without node and npm (`./dev test` installs them).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from pi_dispatch.fleet.mirror import RunMirror, read_mirrored_runs
from pi_dispatch.infra.store import StoreAddress
from pi_dispatch.testing.replicated import PRIMARY_NAME, ReplicatedStore
from pi_dispatch.testing.seed import extract_seed_modules

NODE_MIRROR = """
import Redis from "ioredis";
import { readFileSync } from "node:fs";
const mirror = await import(process.argv[2]);
const [url, mode] = process.argv.slice(3);
// sentinel://host:port,host:port/name: ioredis finds the primary through the Sentinels, as a patched Node fleet would
function connect(address) {
  if (!address.startsWith("sentinel://")) return new Redis(address, { maxRetriesPerRequest: 1 });
  const [hosts, name] = address.slice("sentinel://".length).split("/");
  const sentinels = hosts.split(",").map((hostPort) => {
    const [host, port] = hostPort.split(":");
    return { host, port: Number(port) };
  });
  return new Redis({ sentinels, name, maxRetriesPerRequest: 1 });
}
const redis = connect(url);
const input = JSON.parse(readFileSync(0, "utf8"));
let out;
if (mode === "write") {
  const writer = mirror.makeRunMirror({ redis, retentionDays: input.retentionDays });
  out = [];
  for (const [record, id] of input.records) out.push(await writer.mirror(record, id));
} else {
  out = await mirror.readMirroredRuns(redis, { limit: input.limit });
}
process.stdout.write(JSON.stringify(out));
redis.disconnect();
"""


# A Node receiver's side of a mixed fleet: enqueue a forge job with the reference's options through Node
# BullMQ, then read the Python worker's registry row and route with the seed's own routeForgeJob.
NODE_FLEET = """
import Redis from "ioredis";
import { Queue, Worker } from "bullmq";
import { readFileSync } from "node:fs";
const caps = await import(process.argv[2]);
const [url, mode] = process.argv.slice(3);
const input = JSON.parse(readFileSync(0, "utf8"));
const parsed = new URL(url);
const connection = { host: parsed.hostname, port: Number(parsed.port), maxRetriesPerRequest: null };
let out;
if (mode === "enqueue") {
  const queue = new Queue(input.queue, { connection });
  const job = await queue.add(input.kind, input.data, input.options);
  out = { id: job.id };
  await queue.close();
} else if (mode === "work") {
  // a Node worker takes the first job of a queue: what it sees of the job
  let worker;
  out = await new Promise((resolve) => {
    worker = new Worker(input.queue, async (job) => {
      resolve({ id: job.id, attemptsMade: job.attemptsMade, data: job.data });
      return "done";
    }, { connection });
    setTimeout(() => resolve(null), 20000);
  });
  await worker.close();
} else if (mode === "workers") {
  // what Node's tools (bull-board, Queue.getWorkers) list as the queue's workers
  const queue = new Queue(input.queue, { connection });
  out = { workers: (await queue.getWorkers()).map((client) => client.name) };
  await queue.close();
} else {
  const redis = new Redis(url, { maxRetriesPerRequest: 1 });
  const members = await redis.smembers("host:live");
  const hosts = [];
  for (const name of members) {
    const row = await redis.hgetall(`host:h:${name}`);
    if (!row.name) continue;
    hosts.push({ ...row, staleMs: Date.now() - Number(row.beatAt) });
  }
  out = { hosts, routed: caps.routeForgeJob({ hosts, needs: caps.jobNeeds(input.job), jobId: input.jobId }) };
  redis.disconnect();
}
process.stdout.write(JSON.stringify(out));
"""


@pytest.fixture(scope="module")
def node_mirror(
    tmp_path_factory: pytest.TempPathFactory, seed_diff: Path, node_modules: Path
) -> tuple[str, Path, Path]:
    node = shutil.which("node")
    assert node is not None  # node_modules found it
    workdir = tmp_path_factory.mktemp("node-interop")
    (workdir / "node_modules").symlink_to(node_modules)  # the seed's modules import ioredis and bullmq from here
    modules = extract_seed_modules(seed_diff, workdir)
    harness = workdir / "mirror.mjs"
    harness.write_text(NODE_MIRROR)
    (workdir / "fleet.mjs").write_text(NODE_FLEET)
    return node, harness, modules["run-mirror.mjs"]


def run_node(node_mirror: tuple[str, Path, Path], url: str, mode: str, payload: dict[str, Any]) -> Any:
    """The seed's run-mirror.mjs in `mode` (write or read) on the Valkey at url."""
    node, harness, module = node_mirror
    return run_script(node, harness, module, url, mode, payload)


def run_script(node: str, script: Path, module: Path, url: str, mode: str, payload: dict[str, Any]) -> Any:
    """A node script given a seed module, a Valkey URL and a mode; the payload on stdin, JSON on stdout."""
    done = subprocess.run(
        [node, str(script), module.as_uri(), url, mode],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout)


def now_iso(offset_s: int = 0) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(time.time() + offset_s))


def record(job_id: str, host: str, offset_s: int, **extra: Any) -> dict[str, Any]:
    return {
        "jobId": job_id,
        "kind": "github",
        "target": "acme/web#7",
        "endedAt": now_iso(offset_s),
        "outcome": "completed",
        "tokens": {"input": 1200, "output": 30, "total": 1230, "cost": 0.0123},
        "host": host,
        **extra,
    }


@pytest.mark.node
@pytest.mark.redis
@pytest.mark.slow
async def test_python_writes_node_reads(
    valkey_url: str, client: aioredis.Redis, node_mirror: tuple[str, Path, Path]
) -> None:
    mirror = RunMirror(client, 7)
    written = [record(f"gh-py-{i}", "py-mini", -i, flow="fix ✓") for i in range(3)]
    for rec in written:
        assert await mirror.mirror(rec, rec["jobId"])
    read = run_node(node_mirror, valkey_url, "read", {"limit": 50})
    assert read["degraded"] == "ok"
    assert read["runs"] == written


@pytest.mark.node
@pytest.mark.redis
@pytest.mark.slow
async def test_node_writes_python_reads(
    valkey_url: str, client: aioredis.Redis, node_mirror: tuple[str, Path, Path]
) -> None:
    written = [record(f"gh-node-{i}", "node-mini", -i) for i in range(3)]
    assert run_node(
        node_mirror, valkey_url, "write", {"retentionDays": 7, "records": [[r, r["jobId"]] for r in written]}
    ) == [True, True, True]
    read = await read_mirrored_runs(client, limit=2)
    assert read.degraded == "truncated"
    assert read.runs == written[:2]
    assert 7 * 86_400_000 - 60_000 < await client.pttl("runs:index") <= 7 * 86_400_000


@pytest.mark.node
@pytest.mark.redis
@pytest.mark.slow
async def test_both_writers_store_the_same_bytes_and_score(
    valkey_url: str, client: aioredis.Redis, node_mirror: tuple[str, Path, Path]
) -> None:
    same = record("gh-same", "mini1", 0, ratio=1.0, big=1e21, small=1e-7, text='é😀\u2028"\\', nothing=None)
    run_node(node_mirror, valkey_url, "write", {"retentionDays": 30, "records": [[same, "gh-same"]]})
    node_bytes, node_score = await client.get("runs:rec:gh-same"), await client.zscore("runs:index", "gh-same")
    await client.flushdb()
    assert await RunMirror(client, 30).mirror(json.loads(json.dumps(same)), "gh-same")
    assert await client.get("runs:rec:gh-same") == node_bytes
    assert await client.zscore("runs:index", "gh-same") == node_score


async def mirrored_once_the_store_answers(mirror: RunMirror, rec: dict[str, Any], timeout_s: float = 30) -> bool:
    """Mirror rec, asked again while the client finds the newly promoted primary."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if await mirror.mirror(rec, rec["jobId"]):
                return True
        except Exception:  # the old primary's connection is gone; the next ask goes through the Sentinels
            pass
        await asyncio.sleep(0.2)
    return False


@pytest.mark.node
@pytest.mark.redis
@pytest.mark.slow
async def test_a_node_client_through_the_sentinels_shares_a_replicated_store_across_a_failover(
    node_mirror: tuple[str, Path, Path],
) -> None:
    with ReplicatedStore() as store:
        sentinels = ",".join(f"127.0.0.1:{node.port}" for node in store.watchers)
        through_sentinels = f"sentinel://{sentinels}/{PRIMARY_NAME}"
        client = store.address().client()
        try:
            before = [record(f"gh-node-{i}", "node-mini", -10 - i) for i in range(2)]
            written = run_node(
                node_mirror,
                through_sentinels,
                "write",
                {"retentionDays": 7, "records": [[r, r["jobId"]] for r in before]},
            )
            assert written == [True, True]
            await client.set("interop:fence", "1")  # after Node's writes: once both replicas hold it, they hold those
            assert await client.execute_command("WAIT", 2, 5000) == 2
            store.kill(store.primary())
            store.wait_settled()
            assert await mirrored_once_the_store_answers(RunMirror(client, 7), record("gh-py-after", "py-mini", 0))
            after = record("gh-node-after", "node-mini", 1)
            written = run_node(
                node_mirror, through_sentinels, "write", {"retentionDays": 7, "records": [[after, after["jobId"]]]}
            )
            assert written == [True]
            read = run_node(node_mirror, through_sentinels, "read", {"limit": 50})
        finally:
            await client.aclose()
    assert read["degraded"] == "ok"
    assert [(run["jobId"], run["host"]) for run in read["runs"]] == [
        ("gh-node-after", "node-mini"),
        ("gh-py-after", "py-mini"),
        ("gh-node-0", "node-mini"),
        ("gh-node-1", "node-mini"),
    ]


def run_node_fleet(node_mirror: tuple[str, Path, Path], url: str, mode: str, payload: dict[str, Any]) -> Any:
    """The Node receiver's side (fleet.mjs) with the seed's capabilities.mjs: `enqueue` or `route`."""
    node, harness, _ = node_mirror
    return run_script(node, harness.parent / "fleet.mjs", harness.parent / "capabilities.mjs", url, mode, payload)


@pytest.mark.docker
@pytest.mark.node
@pytest.mark.redis
@pytest.mark.slow
async def test_a_node_producer_and_reader_share_a_fleet_with_a_python_worker(
    node_mirror: tuple[str, Path, Path],
    tmp_path: Path,
    valkey_url: str,
    client: aioredis.Redis,
    job_image: str,
) -> None:
    from bullmq import Queue

    from pi_dispatch.fleet.enqueue import ForgeRouter, forge_job_options, registry_reader
    from pi_dispatch.testing.jobs import RESOLVER, forge_job, write_script
    from tests.support.workers import finished_job, running_worker, settings_of, worker_env

    resolver = write_script(tmp_path / "resolver", RESOLVER)
    env = worker_env(tmp_path, valkey_url, job_image, "py-mini", PI_SECRET_PROFILES=f"prod:{resolver}")
    job = forge_job(41, secretsProfile="prod", secrets={"DEPLOY_TOKEN": "ref"})
    options = forge_job_options("github", job)
    plain = settings_of(worker_env(tmp_path, valkey_url, job_image, "py-plain"))
    async with running_worker(settings_of(env)) as worker, running_worker(plain):
        python_route = await ForgeRouter(registry_reader(client)).queue_for("github", job)
        seen = await asyncio.to_thread(
            run_node_fleet, node_mirror, valkey_url, "route", {"job": job, "jobId": options["jobId"]}
        )
        assert seen["routed"] == "py-mini"  # a Node receiver routes a prod job to the Python host
        for queue_name, draining in (("pi-jobs", 2), ("pi-jobs@py-mini", 1)):
            listed = await asyncio.to_thread(run_node_fleet, node_mirror, valkey_url, "workers", {"queue": queue_name})
            assert listed["workers"] == [queue_name] * 2 * draining  # each worker's two connections, as Node's
        assert python_route == "pi-jobs@py-mini"  # and so does ours
        row = next(host for host in seen["hosts"] if host["name"] == "py-mini")
        assert (row["caps"], row["routes"]) == ("s:prod", "true")
        queue_name = f"pi-jobs@{seen['routed']}"
        added = await asyncio.to_thread(
            run_node_fleet,
            node_mirror,
            valkey_url,
            "enqueue",
            {"queue": queue_name, "kind": "github", "data": job, "options": options},
        )
        assert added["id"] == options["jobId"]
        queue = Queue(queue_name, {"connection": valkey_url})
        try:
            done = await finished_job(queue, options["jobId"])
        finally:
            await queue.close()
        await worker.worker.recorder.settle()
    assert done.returnvalue["outcome"] == "completed"
    mirrored = await asyncio.to_thread(run_node, node_mirror, valkey_url, "read", {"limit": 10})
    assert [(run["jobId"], run["host"], run["outcome"]) for run in mirrored["runs"]] == [
        (options["jobId"], "py-mini", "completed")
    ]


@pytest.mark.node
@pytest.mark.redis
@pytest.mark.slow
async def test_a_node_worker_takes_a_job_re_homed_from_a_silent_python_host(
    node_mirror: tuple[str, Path, Path], valkey_url: str, client: aioredis.Redis
) -> None:
    from bullmq import Queue

    from pi_dispatch.core.keys import rehome_since_key
    from pi_dispatch.fleet.enqueue import forge_job_options
    from pi_dispatch.fleet.registry import HostRegistry
    from pi_dispatch.fleet.rehome import Rehomer
    from pi_dispatch.testing.jobs import forge_job

    job = forge_job(51, secretsProfile="prod")
    queue = Queue("pi-jobs@gone", {"connection": valkey_url})
    added = await queue.add("github", job, forge_job_options("github", job))
    await queue.close()
    await client.hincrby(f"bull:pi-jobs@gone:{added.id}", "atm", 1)
    rows = [HostRegistry(client, "node-mini"), HostRegistry(client, "other")]
    await rows[0].start({"routes": "true", "caps": "s:prod"})
    await rows[1].start({"routes": "true", "caps": ""})
    await client.set(rehome_since_key("gone"), str(int(time.time() * 1000) - 600_000))
    mover = Rehomer(client, StoreAddress(valkey_url), 10_000, 2_000)
    try:
        assert await mover.sweep() == 1
    finally:
        await mover.close()
        for row in rows:
            await row.close()
    seen = await asyncio.to_thread(run_node_fleet, node_mirror, valkey_url, "work", {"queue": "pi-jobs@node-mini"})
    assert seen == {"id": added.id, "attemptsMade": 1, "data": job}


@pytest.mark.docker
@pytest.mark.node
@pytest.mark.redis
@pytest.mark.slow
async def test_what_the_receiver_enqueues_runs_on_a_python_and_a_node_worker(
    node_mirror: tuple[str, Path, Path], tmp_path: Path, valkey_url: str, client: aioredis.Redis, job_image: str
) -> None:
    from bullmq import Queue

    from pi_dispatch.testing.jobs import RESOLVER, write_script
    from tests.support.receiving import github_labeled, queued_jobs, rules_of, served
    from tests.support.workers import finished_job, running_worker, settings_of, worker_env

    deploy = {"kind": "github", "flow": "deploy", "secretsProfile": "prod", "secrets": {"DEPLOY_TOKEN": "ref"}}
    rules = rules_of(
        {"on": {"type": "label", "any": ["pi:deploy"]}, "run": deploy},
        {"on": {"type": "label", "any": ["pi:plain"]}, "run": {"kind": "github", "flow": "plain"}},
    )

    resolver = write_script(tmp_path / "resolver", RESOLVER)
    env = worker_env(tmp_path, valkey_url, job_image, "py-mini", PI_SECRET_PROFILES=f"prod:{resolver}")
    plain = settings_of(worker_env(tmp_path, valkey_url, job_image, "py-plain"))  # so prod is not everywhere
    async with running_worker(settings_of(env)), running_worker(plain), served(valkey_url, rules) as receiver:
        from pi_dispatch.fleet.registry import LiveHosts, read_live_hosts

        for _ in range(100):  # until both workers' first beats are in the registry the receiver routes from
            live = await read_live_hosts(client)
            if isinstance(live, LiveHosts) and {"py-mini", "py-plain"} <= {row.get("name") for row in live.hosts}:
                break
            await asyncio.sleep(0.1)
        assert (await receiver.github("issues", github_labeled("pi:deploy", 51), "mixed-1"))[0] == 202
        assert receiver.events("forge_job_routed")[-1] == {"kind": "github", "host": "py-mini", "needs": "s:prod"}
        queue = Queue("pi-jobs@py-mini", {"connection": valkey_url})
        try:
            done = await finished_job(queue, "gh-mixed-1")
        finally:
            await queue.close()
    assert done.returnvalue["outcome"] == "completed"  # the Python worker ran what the receiver queued
    async with served(valkey_url, rules) as receiver:
        assert (await receiver.github("issues", github_labeled("pi:plain", 52), "mixed-2"))[0] == 202
    stored = (await queued_jobs(valkey_url))["gh-mixed-2"][1]
    seen = await asyncio.to_thread(run_node_fleet, node_mirror, valkey_url, "work", {"queue": "pi-jobs"})
    assert seen["id"] == "gh-mixed-2" and seen["data"] == stored  # a Node worker takes it, byte for byte the same
    assert seen["data"]["trigger"]["matched"] == {"index": 1, "type": "label", "label": "pi:plain"}
