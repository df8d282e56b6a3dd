"""A fleet of N hosts on one store: the idle load per host and fleet-wide, the operator's reads, routing, footprint.

A private redis-server holds a registry of N simulated hosts (rows written as a beat writes them, every 15 s; one in
ten silent, its row left to age, with a cron job that waits for it) and a host queue per host with a job waiting,
beside three real `pi-dispatch
worker` processes (named, idle). Per N = 10, 100, 1,000, 5,000 it prints:
- the idle store load: commands/s of each real host (INFO's command count over a window, less the simulator's own
  beats and the registry reads; the sweeper's look at the silent hosts' queues stays in it, so it is an upper
  bound), the fleet-wide shared cost per row (HGETALLs of rows per second per row: snapshot refreshes, whoever
  runs them), the fleet-wide idle load at N hosts computed from both, and Valkey's own CPU per real host;
- the plain anchor: a Python BullMQ worker on the same two queues, alone, in the same run;
- routing: the median time of a routed decision and the router view's age, and how many abstained;
- the time of `top --once`, `hosts` and `audit --live`, and of one re-home sweep, with the commands each sent;
- the idle RSS of a real worker against the plain BullMQ worker's.

Goals (issue 24): own idle load <= 1.5x the plain worker's; shared <= 0.15 commands/s per row; `top --once` <= 1 s
and `audit --live` <= 2 s at N=5,000; no decision abstains for lack of a registry read.
Usage: python bench/scale.py [--sizes 10,100,1000,5000] [--window 30]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import redis

from pi_dispatch.core.keys import HOST_LIVE, bull_key, host_queue_name, host_row_key
from pi_dispatch.demo.jobimage import EXAMPLE_IMAGE
from pi_dispatch.fleet.enqueue import ForgeRouter, registry_reader
from pi_dispatch.fleet.rehome import Rehomer
from pi_dispatch.infra.valkey import connect
from pi_dispatch.testing.jobs import forge_job
from pi_dispatch.testing.services import RedisServer, worker_process_env

REAL = ("real1", "real2", "real3")
BEAT_S = 15.0
PLAIN = """
import asyncio, sys
from bullmq import Worker
async def main():
    async def process(job, token):
        return None
    workers = [Worker(queue, process, {"connection": sys.argv[1]}) for queue in ("pi-jobs", "pi-jobs@plain")]
    await asyncio.sleep(3600)
asyncio.run(main())
"""


def sim_row(number: int, now_ms: int) -> tuple[str, dict[str, str]]:
    name = f"sim{number:05d}"
    silent = number % 10 == 9
    beat = now_ms - (120_000 if silent else 0)
    return name, {
        "name": name,
        "beatAt": str(beat),
        "startedAt": str(beat - 3_600_000),
        "version": "0.0.0",
        "routes": "true",
        "caps": "s:prod" if number % 3 == 0 else "w:ci",
        "concurrency": "2",
        "pid": "1",
        "image": "pi-job:latest",
        "imageDigest": "",
        "piVersion": "",
        "tz": "UTC",
        "fpCron": "",
        "cronCount": "0",
        "slotsFree": "2",
        "polledAt": str(beat),
        "consumer": "ok",
        "jobs": "[]",
        "jobsMore": "0",
    }


class Simulator:
    """N rows beaten every 15 s as workers beat them (the silent ones never), and a queue with a job per host."""

    def __init__(self, url: str, count: int) -> None:
        self.store = redis.Redis.from_url(url)
        self.count = count
        self.commands = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def seed(self) -> None:
        pipe = self.store.pipeline(transaction=False)
        now = int(time.time() * 1000)
        for number in range(self.count):
            queue = host_queue_name(f"sim{number:05d}")
            # a silent host's job is its cron's (local): it waits for its host, so sweeps keep looking at it
            data = '{"kind":"local"}' if number % 10 == 9 else "{}"
            pipe.hset(bull_key(queue, "meta"), mapping={"opts.maxLenEvents": "10000"})
            pipe.hset(bull_key(queue, "j1"), mapping={"name": "cron", "data": data, "opts": "{}", "timestamp": now})
            pipe.lpush(bull_key(queue, "wait"), "j1")
        pipe.execute()
        self.beat(initial=True)

    def beat(self, *, initial: bool = False) -> None:
        now = int(time.time() * 1000)
        pipe = self.store.pipeline(transaction=False)
        sent = 0
        for number in range(self.count):
            name, row = sim_row(number, now)
            if number % 10 == 9 and not initial:
                continue  # silent: its row ages until it expires
            pipe.delete(host_row_key(name))
            pipe.hset(host_row_key(name), mapping=row)
            pipe.pexpire(host_row_key(name), 90_000)
            pipe.sadd(HOST_LIVE, name)
            sent += 4
        pipe.execute()
        self.commands += sent

    def _run(self) -> None:
        while not self._stop.wait(BEAT_S):
            self.beat()

    def __enter__(self) -> Simulator:
        self.seed()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self.store.close()


def stats(store: redis.Redis) -> tuple[int, int, float]:
    """Commands processed, HGETALLs, and Valkey's CPU seconds so far."""
    info = store.info("all")
    hgetall = int(info.get("cmdstat_hgetall", {}).get("calls", 0))
    return int(info["total_commands_processed"]), hgetall, float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def rss_mb(pid: int) -> float:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    return float("nan")


def window(store: redis.Redis, sim: Simulator, seconds: float) -> tuple[float, float, float]:
    """Commands/s (less the simulator's and these reads'), HGETALLs/s and Valkey CPU/s over a window."""
    before, sim_before = stats(store), sim.commands
    time.sleep(seconds)
    after = stats(store)
    own_reads = 2  # the two INFO calls
    commands = after[0] - before[0] - (sim.commands - sim_before) - own_reads
    return commands / seconds, (after[1] - before[1]) / seconds, (after[2] - before[2]) / seconds


def timed_cli(url: str, *args: str) -> tuple[float, int]:
    store = redis.Redis.from_url(url)
    before = stats(store)[0]
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pi_dispatch", *args, "--valkey-url", url], capture_output=True, check=False)
    elapsed = time.perf_counter() - started
    sent = stats(store)[0] - before - 1
    store.close()
    return elapsed, sent


async def routing(url: str, decisions: int = 200) -> tuple[float, float, int]:
    """Median decision time (ms), the view's age at the end (s), and how many routed jobs abstained."""
    client = connect(url)
    router = ForgeRouter(registry_reader(client))
    times, abstained = [], 0
    for number in range(decisions):
        job = forge_job(number, secretsProfile="prod")
        started = time.perf_counter()
        queue = await router.queue_for("github", job)
        times.append((time.perf_counter() - started) * 1000)
        abstained += queue == "pi-jobs"
        await asyncio.sleep(0.005)
    age = router.view_age_s
    await client.aclose()
    return statistics.median(times), age, abstained


async def sweep_time(url: str) -> tuple[float, int]:
    client = connect(url)
    store = redis.Redis.from_url(url)
    before = stats(store)[0]
    mover = Rehomer(client, url, 120_000, 30_000)
    started = time.perf_counter()
    await mover.sweep()
    elapsed = time.perf_counter() - started
    sent = stats(store)[0] - before - 1
    await mover.close()
    await client.aclose()
    store.close()
    return elapsed, sent


def inventory(root: Path) -> Path:
    path = root / "hosts.yml"
    hosts = "".join(f"        {name}: {{pi_dispatch_worker_name: {name}}}\n" for name in REAL)
    path.write_text(f"all:\n  children:\n    pi_dispatch_workers:\n      hosts:\n{hosts}")
    return path


def measure(root: Path, server: RedisServer, count: int, seconds: float) -> dict[str, Any]:
    store = redis.Redis.from_url(server.url)
    store.flushdb()
    figures: dict[str, Any] = {"n": count}
    with Simulator(server.url, count) as sim:
        workers = []
        for name in REAL:
            env = worker_process_env(root, server.url, EXAMPLE_IMAGE, name, PI_METRICS_ADDR="")
            log = (root / f"{name}-{count}.log").open("wb")
            workers.append(
                subprocess.Popen([sys.executable, "-m", "pi_dispatch", "worker"], env=env, stdout=log, stderr=log)
            )
        time.sleep(BEAT_S + 5)  # every worker through a beat: the snapshot and the sweeper elected
        total, hgetall, cpu = window(store, sim, seconds)
        figures["rss"] = statistics.median(rss_mb(worker.pid) for worker in workers)
        rows_read = hgetall  # each whole-registry read is one HGETALL per row
        figures["own"] = (total - rows_read) / len(REAL)
        figures["shared_per_row"] = rows_read / count
        figures["cpu_per_host"] = cpu / len(REAL)
        figures["top"] = timed_cli(server.url, "top", "--once")
        figures["hosts"] = timed_cli(server.url, "hosts")
        figures["audit"] = timed_cli(server.url, "audit", "-i", str(inventory(root)), "--live")
        figures["sweep"] = asyncio.run(sweep_time(server.url))
        figures["route"] = asyncio.run(routing(server.url))
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(60)
        plain = subprocess.Popen([sys.executable, "-c", PLAIN, server.url])
        time.sleep(8)
        figures["plain"] = window(store, sim, seconds)[0]
        figures["plain_rss"] = rss_mb(plain.pid)
        plain.terminate()
        plain.wait(30)
    store.close()
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100,1000,5000")
    parser.add_argument("--window", type=float, default=30.0)
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="pi-scale-") as folder:
        root = Path(folder)
        (root / "redis").mkdir()
        server = RedisServer(root / "redis")
        server.start()
        try:
            for count in sizes:
                figures = measure(root, server, count, args.window)
                rows.append(figures)
                print(f"  N={count} measured", flush=True)
        finally:
            server.stop()
    print("\nidle store load (commands/s) and reads; three real workers among N simulated hosts")
    header = (
        f"{'N':>6} {'own c/s':>8} {'plain':>6} {'ratio':>6} {'shared/row':>10} {'fleet c/s':>10} {'cpu/host':>9} "
        f"{'route ms':>8} {'view s':>6} {'abst':>4} {'top s':>6} {'hosts s':>7} {'audit s':>7} {'sweep s':>7} "
        f"{'sweep cmds':>10} {'rss MB':>7} {'plain MB':>8}"
    )
    print(header)
    for f in rows:
        fleet = f["n"] * f["own"] + f["shared_per_row"] * f["n"]
        print(
            f"{f['n']:>6} {f['own']:>8.2f} {f['plain']:>6.2f} {f['own'] / f['plain']:>6.2f} "
            f"{f['shared_per_row']:>10.3f} {fleet:>10.0f} {f['cpu_per_host'] * 100:>8.3f}% "
            f"{f['route'][0]:>8.3f} {f['route'][1]:>6.1f} {f['route'][2]:>4} {f['top'][0]:>6.2f} "
            f"{f['hosts'][0]:>7.2f} {f['audit'][0]:>7.2f} {f['sweep'][0]:>7.3f} {f['sweep'][1]:>10} "
            f"{f['rss']:>7.1f} {f['plain_rss']:>8.1f}"
        )
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
