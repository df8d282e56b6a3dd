"""A fleet of N hosts on one store: the idle load per host and fleet-wide, the operator's reads, routing, footprint.

A private redis-server holds a registry of N simulated hosts (rows written as a beat writes them, every 15 s; one in
ten silent, its row left to age, with a cron job that waits for it) and a host queue per host with a job waiting,
beside three real `pi-dispatch worker` processes (named, idle). Per N = 10, 100, 1,000, 5,000 it prints:
- the idle store load, split by what the commands touch (MONITOR over a window): a real host's own commands/s
  (its beat, its queues, its read of the fleet's snapshot, whatever it touches that is not another host's), and
  the fleet's shared commands/s (whatever touches the simulated hosts' rows and queues: the snapshot's refresh,
  the sweeper's look at the silent hosts), per row; the fleet's idle load at N hosts computed from both
  (N x own + shared, the simulator's beats being each host's own beat); Valkey's CPU (INFO deltas against a window
  with the simulator alone) split between own and shared by their commands, and the fleet's share of a core;
- the plain anchor: a Python BullMQ worker on the same two queues, alone, in the same run;
- routing: the median time of a routed decision and the router view's age, and how many abstained;
- the time of `top --once`, `hosts` and `audit --live` (its inventory the real hosts alone: the live reads; and,
  `+inv`, with every simulated host declared: ansible-core's load and each host's checks too), and of a re-home
  sweeper's first and next sweep, with the commands each sent (a script counts one, as MONITOR sees it);
- the idle RSS of a real worker against the plain BullMQ worker's.

Goals (issue 24): own idle load <= 1.5x the plain worker's; shared <= 0.15 commands/s per row; fleet idle load at
N=1,000 under 10% of a core; `top --once` and `hosts` <= 1 s (issue 38) and `audit --live` <= 2 s at N=5,000, each
net of the command's start-up (`--version`, printed beside them); no decision abstains.
Usage: python bench/scale.py [--sizes 10,100,1000,5000] [--window 30]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import redis

from pi_dispatch.core.keys import HOST_LIVE, REHOME_LEASE, bull_key, host_queue_name, host_row_key
from pi_dispatch.demo.jobimage import EXAMPLE_IMAGE
from pi_dispatch.fleet.enqueue import ForgeRouter, registry_reader
from pi_dispatch.fleet.rehome import Rehomer
from pi_dispatch.infra.clock import host_zone
from pi_dispatch.infra.store import StoreAddress
from pi_dispatch.infra.valkey import connect
from pi_dispatch.testing.jobs import forge_job
from pi_dispatch.testing.services import PLAIN_BULLMQ_WORKER, RedisServer, rss_mb, worker_process_env

REAL = ("real1", "real2", "real3")
BEAT_S = 15.0
ZONE = host_zone(None)


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
        "tz": ZONE,  # the real workers' own: a fleet that agrees on its zone
        "fpCron": "",
        "cronCount": "0",
        "slotsFree": "2",
        "polledAt": str(beat),
        "consumer": "ok",
        "jobs": "[]",
        "jobsMore": "0",
        # what every current worker publishes: its limits (`top` reads the caps most hosts publish) and dollar caps
        "limits": "day=25;week=;month=;hold=;tokens=;files="
        if number % 2
        else "day=40;week=;month=;hold=;tokens=;files=",
        "fpUsd": "0123456789abcdef",
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


def stats(store: redis.Redis) -> tuple[int, float]:
    """Commands processed and Valkey's CPU seconds so far."""
    info = store.info("all")
    return int(info["total_commands_processed"]), float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def cpu_window(store: redis.Redis, sim: Simulator, seconds: float) -> tuple[float, float]:
    """Commands/s (less the simulator's and these reads') and Valkey CPU seconds/s over a window."""
    before, sim_before = stats(store), sim.commands
    time.sleep(seconds)
    after = stats(store)
    commands = after[0] - before[0] - (sim.commands - sim_before) - 2  # the two INFO calls
    return commands / seconds, (after[1] - before[1]) / seconds


SIMULATED = re.compile(r"sim\d{5}")
SIMULATOR_VERBS = frozenset({"DEL", "HSET", "PEXPIRE", "SADD"})  # a beat, as the simulator sends it


class Monitor:
    """MONITOR in a thread: the commands clients send (a script's own calls left out), split into the real
    hosts' own (touching no simulated host) and the fleet's shared (touching one), the simulator's beats apart."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.store = redis.Redis.from_url(url)
        self.own = 0
        self.shared = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with self.store.monitor() as monitor:
            self._started.set()
            for entry in monitor.listen():
                if self._stop.is_set():
                    return
                if entry.get("client_type") == "lua" or entry.get("client_address") == "lua":
                    continue
                command = str(entry.get("command", ""))
                verb = command.split(" ", 1)[0].upper()
                if verb in {"INFO", "MONITOR"}:
                    continue
                if SIMULATED.search(command):
                    if verb not in SIMULATOR_VERBS:
                        self.shared += 1
                else:
                    self.own += 1

    def __enter__(self) -> Monitor:
        self._started = threading.Event()
        self._thread.start()
        self._started.wait(5)
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        with contextlib.suppress(Exception), redis.Redis.from_url(self.url) as waker:
            waker.ping()  # MONITOR answers only when a command comes: one more, so its thread sees the stop
        self._thread.join(5)
        self.store.close()

    @property
    def sent(self) -> int:
        return self.own + self.shared


def timed_cli(url: str, *args: str) -> tuple[float, int]:
    """How long an operator command takes (the median of three), then the commands it sends, counted in a run of
    their own (MONITOR slows the store down; with the idle workers' meanwhile)."""
    command = [sys.executable, "-m", "pi_dispatch", *args, "--valkey-url", url]
    times = []
    for _ in range(3):
        started = time.perf_counter()
        subprocess.run(command, capture_output=True, check=False)
        times.append(time.perf_counter() - started)
    with Monitor(url) as monitor:
        subprocess.run(command, capture_output=True, check=False)
    return statistics.median(times), monitor.sent


def start_up() -> float:
    """What any command takes before it does anything (`--version`, the median of three): the times above less this
    are what a command costs for the fleet's size."""
    times = []
    for _ in range(3):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "pi_dispatch", "--version"], capture_output=True, check=False)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


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


async def sweep_time(url: str) -> tuple[float, int, float, int]:
    """A sweeper's first sweep (it looks at every silent host's jobs) and its next (only at what changed): the
    time and commands of each. Run with no worker left, so this one holds the lease."""
    client = connect(url)
    mover = Rehomer(client, StoreAddress(url), 120_000, 30_000)
    figures: list[float] = []
    for _ in range(2):
        await client.delete(REHOME_LEASE)  # the interval over: this sweeper elected, as a worker's would be
        with Monitor(url) as monitor:
            started = time.perf_counter()
            await mover.sweep(hold=True)
            figures += [time.perf_counter() - started, monitor.sent]
    await mover.close()
    await client.aclose()
    return figures[0], int(figures[1]), figures[2], int(figures[3])


def inventory(root: Path, count: int) -> Path:
    """The fleet as its operator declares it: the real workers and `count` simulated hosts, with their profiles
    (0: the real ones alone, so the audit's cost is its live reads; else its inventory's load and checks too)."""
    path = root / f"hosts-{count}.yml"
    lines = ["all:", "  children:", "    pi_dispatch_workers:", "      hosts:"]
    lines += [f"        {name}: {{pi_dispatch_worker_name: {name}}}" for name in REAL]
    for number in range(count):
        name = f"sim{number:05d}"
        profiles = "pi_dispatch_worker_secret_profiles: {prod: /opt/p/prod}" if number % 3 == 0 else (
            "pi_dispatch_worker_wait_profiles: {ci: /opt/p/ci}")  # fmt: skip
        lines.append(f"        {name}: {{pi_dispatch_worker_name: {name}, {profiles}}}")
    path.write_text("\n".join(lines) + "\n")
    return path


def measure(root: Path, server: RedisServer, count: int, seconds: float) -> dict[str, Any]:
    store = redis.Redis.from_url(server.url)
    store.flushdb()
    figures: dict[str, Any] = {"n": count}
    with Simulator(server.url, count) as sim:
        time.sleep(2)
        _, cpu_alone = cpu_window(store, sim, seconds)  # the simulator's beats alone
        workers = []
        for name in REAL:
            env = worker_process_env(root, server.url, EXAMPLE_IMAGE, name, PI_METRICS_ADDR="")
            log = (root / f"{name}-{count}.log").open("wb")
            workers.append(
                subprocess.Popen([sys.executable, "-m", "pi_dispatch", "worker"], env=env, stdout=log, stderr=log)
            )
        time.sleep(BEAT_S + 5)  # every worker through a beat: the snapshot and the sweeper elected
        _, cpu_with = cpu_window(store, sim, seconds)
        with Monitor(server.url) as monitor:
            time.sleep(seconds)
        figures["rss"] = statistics.median(rss_mb(worker.pid) for worker in workers)
        figures["own"] = monitor.own / seconds / len(REAL)
        figures["shared"] = monitor.shared / seconds
        extra = max(0.0, cpu_with - cpu_alone)  # what the workers' own and the shared work cost Valkey
        own_part = monitor.own / monitor.sent if monitor.sent else 0.0
        figures["cpu_own"] = extra * own_part / len(REAL)  # per real host, its beat aside (in cpu_alone)
        figures["cpu_shared"] = extra * (1 - own_part)
        figures["cpu_beat"] = cpu_alone / max(1, count)  # each simulated host's beat
        figures["top"] = timed_cli(server.url, "top", "--once")
        figures["hosts"] = timed_cli(server.url, "hosts")
        figures["start"] = start_up()
        figures["audit"] = timed_cli(server.url, "audit", "-i", str(inventory(root, 0)), "--live")
        figures["audit_all"] = timed_cli(server.url, "audit", "-i", str(inventory(root, count)), "--live")
        figures["route"] = asyncio.run(routing(server.url))
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(60)
        figures["sweep"] = asyncio.run(sweep_time(server.url))
        plain = subprocess.Popen([sys.executable, "-c", PLAIN_BULLMQ_WORKER, server.url])
        time.sleep(8)
        figures["plain"] = cpu_window(store, sim, seconds)[0]
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
        f"{'N':>6} {'own c/s':>8} {'plain':>6} {'ratio':>6} {'shared/row':>10} {'fleet c/s':>10} {'fleet cpu':>9} "
        f"{'route ms':>8} {'view s':>6} {'abst':>4} {'top s':>6} {'cmds':>6} {'hosts s':>7} {'audit s':>7} "
        f"{'cmds':>6} {'+inv s':>6} {'sweep s':>7} {'cmds':>6} {'next':>5} {'rss MB':>7} {'plain MB':>8} {'start s':>7}"
    )
    print(header)
    for f in rows:
        fleet = f["n"] * f["own"] + f["shared"]
        fleet_cpu = f["n"] * (f["cpu_own"] + f["cpu_beat"]) + f["cpu_shared"]
        print(
            f"{f['n']:>6} {f['own']:>8.2f} {f['plain']:>6.2f} {f['own'] / f['plain']:>6.2f} "
            f"{f['shared'] / f['n']:>10.3f} {fleet:>10.0f} {fleet_cpu * 100:>8.2f}% "
            f"{f['route'][0]:>8.3f} {f['route'][1]:>6.1f} {f['route'][2]:>4} {f['top'][0]:>6.2f} {f['top'][1]:>6} "
            f"{f['hosts'][0]:>7.2f} {f['audit'][0]:>7.2f} {f['audit'][1]:>6} {f['audit_all'][0]:>6.1f} "
            f"{f['sweep'][0]:>7.3f} {f['sweep'][1]:>6} {f['sweep'][3]:>5} {f['rss']:>7.1f} {f['plain_rss']:>8.1f} "
            f"{f['start']:>7.2f}"
        )
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
