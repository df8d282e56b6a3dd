"""Routing decisions per second: this port's RouteTable against the seed's routeForgeJob under node.

Same inputs for both, measured in the same run: 50 live hosts (a mix of capabilities, some stale, some
without a declared name) and 20,000 forge delivery job ids over a few kinds of needs. Also prints the
round trips one mirror write and one mirror read take on a real redis-server.

    python bench/route.py [--shared ../shared]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pi_dispatch.core.routing import RouteTable, route_forge_job
from pi_dispatch.testing.seed import extract_seed_modules, node_binary

REPO = Path(__file__).resolve().parent.parent

HOSTS = 50
JOBS = 20_000
NEEDS = [["s:prod"], ["w:ci"], ["s:prod", "w:ci"], ["s:staging"], ["w:nightly"]]

NODE_BENCH = """
import { readFileSync } from "node:fs";
const caps = await import(process.argv[2]);
const { hosts, jobs } = JSON.parse(readFileSync(0, "utf8"));
let best = Infinity, picks = null;
for (let round = 0; round < 7; round++) {
  const out = new Array(jobs.length);
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < jobs.length; i++) out[i] = caps.routeForgeJob({ hosts, needs: jobs[i][0], jobId: jobs[i][1] });
  const ns = Number(process.hrtime.bigint() - t0);
  if (ns < best) { best = ns; picks = out; }
}
process.stdout.write(JSON.stringify({ seconds: best / 1e9, picks }));
"""


def fleet(rng: random.Random) -> list[dict[str, object]]:
    tokens = ["s:prod", "s:staging", "w:ci", "w:nightly"]
    hosts = []
    for index in range(HOSTS):
        caps = ",".join(sorted(t for t in tokens if rng.random() < 0.4))
        hosts.append(
            {
                "name": f"mini{index:02d}",
                "caps": caps,
                "routes": "true" if rng.random() < 0.85 else "false",
                "staleMs": rng.choice([0, 5_000, 14_000, 30_000, 60_000]),
                "version": "1.8.0",
                "tz": "UTC",
            }
        )
    return hosts


def python_rate(hosts: list[dict[str, object]], jobs: list[tuple[list[str], str]]) -> tuple[float, list[str | None]]:
    best = float("inf")
    picks: list[str | None] = []
    for _ in range(7):
        started = time.perf_counter()
        table = RouteTable.from_hosts(hosts)  # one registry snapshot, parsed once, as the router does
        out = [table.route(needs, job_id) for needs, job_id in jobs]
        elapsed = time.perf_counter() - started
        if elapsed < best:
            best, picks = elapsed, out
    return best, picks


async def mirror_round_trips() -> tuple[int, int]:
    import redis.asyncio.connection as connection_module

    from pi_dispatch.demo.store import EmbeddedValkey
    from pi_dispatch.fleet.mirror import RunMirror, read_mirrored_runs
    from pi_dispatch.infra.valkey import connect

    sends = 0
    original = connection_module.AbstractConnection.send_packed_command

    async def counting(self, command, check_health=True):  # type: ignore[no-untyped-def]
        nonlocal sends
        sends += 1
        return await original(self, command, check_health)

    connection_module.AbstractConnection.send_packed_command = counting  # type: ignore[method-assign]
    with EmbeddedValkey() as valkey:
        client = connect(valkey.url)
        await client.ping()
        mirror = RunMirror(client, 30)
        now = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
        for index in range(20):
            await mirror.mirror({"jobId": f"j{index}", "endedAt": now, "host": "mini1"}, f"j{index}")
        sends = 0
        await mirror.mirror({"jobId": "probe", "endedAt": now, "host": "mini1"}, "probe")
        write_trips = sends
        sends = 0
        result = await read_mirrored_runs(client, limit=20)
        read_trips = sends
        assert len(result.runs) == 20
        await client.aclose()
    connection_module.AbstractConnection.send_packed_command = original  # type: ignore[method-assign]
    return write_trips, read_trips


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=REPO.parent / "shared")
    options = parser.parse_args()
    rng = random.Random(57)
    hosts = fleet(rng)
    jobs = [(rng.choice(NEEDS), f"gh-{rng.getrandbits(128):032x}" + rng.choice(["", "-r2"])) for _ in range(JOBS)]

    node = node_binary()
    if node is None:
        print("node is not installed: the seed's routeForgeJob cannot be measured (apt-get install nodejs)")
        return 1
    with tempfile.TemporaryDirectory() as scratch:
        modules = extract_seed_modules(options.shared / "seed" / "pi-dispatch-1.7.0-to-1.8.0.diff", Path(scratch))
        harness = Path(scratch) / "bench.mjs"
        harness.write_text(NODE_BENCH)
        completed = subprocess.run(
            [node, str(harness), modules["capabilities.mjs"].as_uri()],
            input=json.dumps({"hosts": hosts, "jobs": jobs}),
            capture_output=True,
            text=True,
            check=True,
            timeout=300,
        )
    seed = json.loads(completed.stdout)
    python_seconds, python_picks = python_rate(hosts, jobs)
    assert python_picks == seed["picks"], "the port and the seed disagree on a routing decision"
    assert python_picks[:2000] == [route_forge_job(hosts, needs, job_id) for needs, job_id in jobs[:2000]]
    routed = sum(pick is not None for pick in python_picks)

    print(f"routing {JOBS:,} jobs over {HOSTS} hosts ({routed:,} routed to a host queue, the rest shared); best of 7")
    print(
        f"  seed routeForgeJob (node {subprocess.check_output([node, '--version'], text=True).strip()}): "
        f"{JOBS / seed['seconds']:>12,.0f} decisions/s"
    )
    print(
        f"  pi_dispatch RouteTable (CPython {sys.version.split()[0]}):    {JOBS / python_seconds:>12,.0f} decisions/s"
    )
    print(f"  ratio port/seed: {seed['seconds'] / python_seconds:.2f}x (target >= 2x)")
    write_trips, read_trips = asyncio.run(mirror_round_trips())
    print(f"mirror write: {write_trips} round trip(s) per record (the seed awaits 5 commands one by one)")
    print(f"mirror read:  {read_trips} round trip(s) for 20 records (ZREVRANGEBYSCORE + MGET)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
