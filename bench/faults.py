"""Faults that must fail safe, each shown as a figure against real processes (a private redis-server, the product's
receiver in a process of its own), with a goal and a reference measured in the same run.

  store-reset  a worker with two cron entries on a store that loses its data (FLUSHALL); figure: the schedulers
             back, and how long after the loss (goal: all of them, within one beat, 15 s)
  oom-job    a job that holds 200 MiB in a 64 MiB container; figure: the reason its run is recorded with (goal:
             job-oom-killed, never retried)
  unhealthy  two workers, one whose jobs folder is read-only (a read-only tmpfs), and 12 jobs on the shared queue;
             figure: jobs failed for good (goal: 0), and how many the healthy one ran
  slowloris  2,000 sockets that send a request's headers a line at a time and reconnect when closed, from one
             address and then spread over a hundred; meanwhile a legitimate signed delivery every 0.25 s from
             another address. Figure: its latency (median and worst) against the same deliveries with no attack,
             and how many it got answered 202. Goal: every one 202, the worst within 1 s.
  store-full four running jobs of 20 s on a worker whose store fills up for 30 s (maxmemory below its use,
             noeviction); figure: jobs fenced (goal: 0; each completed in one attempt, the worker never restarted),
             and the worker's log lines a minute while the store was full
  clock-skew a host whose clock runs 90 s ahead beside a busy live host with 24 jobs waiting on its queue that
             only it can run; figure: jobs moved off the live host's queue and jobs failed for good (goal: 0 and 0,
             and the skew said)
  spool      `pi-dispatch receiver` taking 20 signed deliveries a second while the store refuses every write for
             10 s, SIGKILLed and started again halfway; figure: deliveries answered 202 whose job is not on the
             queue once the store takes writes (goal: 0, and none answered 503), and how long the spool took to drain
  disk-full, wrong-policy, job-network: see bench/faultcases.py

One line per scenario and round, then the median over rounds with its range. Exit 1 when a goal is missed.

    python bench/faults.py [--rounds 3] [--only slowloris] [--sockets 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from faultcases import Outcome, disk_full, job_network, one_worker, wrong_policy

from pi_dispatch.core.descriptors import descriptors_needed
from pi_dispatch.demo.store import free_port
from pi_dispatch.testing.failover import SECRET, TRIGGERS, delivery  # the failover bench's deliveries
from pi_dispatch.testing.services import RedisServer
from pi_dispatch.worker.after.history import read_records

LATENCY_GOAL_S = 1.0
LEGIT_DELIVERIES = 40
LEGIT_PACE_S = 0.25
TRICKLE_S = 2.0  # a slow sender's pause between header lines
RECONNECT_S = 1.0  # how soon a slow sender comes back once closed


async def serve(port: int, url: str) -> None:
    """The child: the product's receiver with its default deadlines and caps, its open-file limit raised as boot
    raises it, GitHub user 999 standing in for the forge's identity call."""
    from aiohttp import web

    from pi_dispatch.fleet.enqueue import Enqueuer, ForgeRouter, registry_reader
    from pi_dispatch.infra.events import discard
    from pi_dispatch.infra.store import StoreAddress
    from pi_dispatch.infra.valkey import connect
    from pi_dispatch.receiver.forges.spec import Served
    from pi_dispatch.receiver.guard import raise_descriptor_limit
    from pi_dispatch.receiver.rules import Rules
    from pi_dispatch.receiver.server import Receiver, application
    from pi_dispatch.testing.receiving import default_limits
    from pi_dispatch.triggers.file import parse_triggers

    limits = default_limits()
    raise_descriptor_limit(descriptors_needed(limits.max_connections))
    rules = Rules.from_triggers(parse_triggers(json.dumps(TRIGGERS), "bench"))
    enqueuer = Enqueuer(StoreAddress(url), ForgeRouter(registry_reader(connect(url))))
    receiver = Receiver(rules, enqueuer, discard, {"github": Served(SECRET, identity=999)})
    runner = web.ServerRunner(application(receiver, limits), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, backlog=4096).start()
    print("ready", flush=True)
    await asyncio.Event().wait()


async def deliver(port: int, number: int) -> tuple[float, int]:
    """One delivery on a connection of its own, as a forge sends it: its latency and status (0: no answer)."""
    started = time.monotonic()
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 10)
        writer.write(delivery(number))
        head = await asyncio.wait_for(reader.readuntil(b"\r\n"), 10)
        writer.close()
        return time.monotonic() - started, int(head.split()[1])
    except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError, IndexError):
        return time.monotonic() - started, 0


async def legitimate(port: int, base: int) -> list[tuple[float, int]]:
    found = []
    for index in range(LEGIT_DELIVERIES):
        found.append(await deliver(port, base + index))
        await asyncio.sleep(LEGIT_PACE_S)
    return found


@dataclass
class Slowloris:
    """Slow senders from `sources`, each reconnecting a second after the receiver closes it; counts the closes."""

    port: int
    sockets: int
    sources: list[str]
    closed: int = 0
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def _one(self, source: str) -> None:
        while True:
            writer = None
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", self.port, local_addr=(source, 0))
                writer.write(b"POST / HTTP/1.1\r\nHost: bench\r\n")
                line = 0
                while not reader.at_eof():
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(TRICKLE_S):
                            await reader.read(1024)
                    if reader.at_eof():
                        break
                    writer.write(f"X-Slow-{line}: a\r\n".encode())
                    line += 1
            except OSError:
                pass
            finally:
                if writer is not None:
                    writer.close()
            self.closed += 1
            await asyncio.sleep(RECONNECT_S)

    async def run(self) -> None:
        """Open the sockets as a flood arrives, then hold them until cancelled."""
        for index in range(self.sockets):
            self.tasks.append(asyncio.create_task(self._one(self.sources[index % len(self.sources)])))
            if index % 100 == 99:
                await asyncio.sleep(0.05)
        await asyncio.Event().wait()


def attack(port: int, sockets: int, sources: list[str]) -> None:
    """The attacker's own process (so its event loop never delays the legitimate client's): runs until SIGTERM, then
    prints how many of its sockets the receiver closed."""
    import signal

    from pi_dispatch.receiver.guard import raise_descriptor_limit

    raise_descriptor_limit(sockets + 512)  # its own sockets
    flood = Slowloris(port, sockets, sources)

    async def until_stopped() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        running = asyncio.create_task(flood.run())
        await stop.wait()
        print(flood.closed, flush=True)
        os._exit(0)  # the flood's sockets go with the process: nothing of it needs an orderly end
        await running  # not reached

    asyncio.run(until_stopped())


def summary(answers: list[tuple[float, int]]) -> tuple[float, float, int]:
    """Median and worst latency, and how many were answered 202."""
    latencies = [latency for latency, _ in answers]
    return statistics.median(latencies), max(latencies), sum(1 for _, status in answers if status == 202)


async def slowloris(workdir: Path, sockets: int, round_number: int) -> Outcome:
    server = RedisServer(workdir)
    server.start()
    port = free_port()
    child = subprocess.Popen([sys.executable, __file__, "--serve", str(port), server.url], stdout=subprocess.PIPE)
    lines, figures, passed = [], {}, True
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == b"ready"
        base = round_number * 1_000_000
        calm = summary(await legitimate(port, base))
        lines.append(f"no attack: {calm[2]}/{LEGIT_DELIVERIES} answered 202, median {calm[0] * 1000:.0f} ms")
        print(f"slowloris round {round_number}: {lines[-1]}", flush=True)
        spreads = {"one address": ["127.0.0.2"], "a hundred addresses": [f"127.0.1.{i}" for i in range(1, 101)]}
        for offset, (name, sources) in enumerate(spreads.items(), start=1):
            command = [sys.executable, __file__, "--attack", str(port), str(sockets), ",".join(sources)]
            attacker = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
            try:
                await asyncio.sleep(2 + sockets / 1000)  # the flood in place
                seen = summary(await legitimate(port, base + offset * 100_000))
            finally:
                attacker.terminate()
                closed = (attacker.communicate(timeout=30)[0] or "?").strip()
            ok = seen[2] == LEGIT_DELIVERIES and seen[1] <= LATENCY_GOAL_S
            passed &= ok
            figures[f"worst legitimate latency (s), slow sockets from {name}"] = seen[1]
            lines.append(
                f"{sockets} slow sockets from {name}: {seen[2]}/{LEGIT_DELIVERIES} answered 202, median "
                f"{seen[0] * 1000:.0f} ms, worst {seen[1] * 1000:.0f} ms ({seen[1] / max(calm[1], 1e-3):.1f}x the "
                f"calm worst); slow sockets closed by the receiver {closed}" + ("" if ok else "  MISSED")
            )
            print(f"slowloris round {round_number}: {lines[-1]}", flush=True)
    finally:
        child.terminate()
        child.wait(10)
        server.stop()
    return Outcome(lines, figures, passed)


BEAT_S = 15.0  # the worker's beat: the store-reset goal


async def schedulers(url: str, queue: str) -> int:
    from bullmq import Queue

    handle = Queue(queue, {"connection": url})
    try:
        return len(await handle.getJobSchedulers(0, -1))
    finally:
        await handle.close()


async def store_reset(workdir: Path, _sockets: int, round_number: int) -> Outcome:
    cron = [
        {
            "on": {"type": "cron", "id": ident, "pattern": pattern},
            "run": {"kind": "local", "folder": "/srv/app", "flow": "tidy", "task": "tidy up"},
        }
        for ident, pattern in (("nightly", "0 3 * * *"), ("weekly", "0 4 * * 1"))
    ]
    triggers = workdir / "triggers.json"
    triggers.write_text(json.dumps({"triggers": cron}))
    server = RedisServer(workdir)
    server.start()
    try:
        with one_worker(workdir, server.url, PI_TRIGGERS_FILE=str(triggers), TZ="UTC"):
            queue = "pi-jobs@mini1"
            deadline = time.monotonic() + 60
            while await schedulers(server.url, queue) < len(cron) and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
            before = await schedulers(server.url, queue)
            await asyncio.sleep(BEAT_S + 1)  # the worker has read the fleet's epoch at a beat
            import redis

            flusher = redis.Redis.from_url(server.url)
            flusher.flushall()
            flusher.close()
            lost_at = time.monotonic()
            while await schedulers(server.url, queue) < before and time.monotonic() - lost_at < 3 * BEAT_S:
                await asyncio.sleep(0.2)
            back, after_s = await schedulers(server.url, queue), time.monotonic() - lost_at
    finally:
        server.stop()
    ok = back == before == len(cron) and after_s <= BEAT_S
    line = f"schedulers before the loss {before}, back {back}, {after_s:.1f} s after it" + ("" if ok else "  MISSED")
    print(f"store-reset round {round_number}: {line}", flush=True)
    return Outcome([line], {"seconds until the schedulers were back": after_s}, ok)


async def oom_job(workdir: Path, _sockets: int, round_number: int) -> Outcome:
    from bullmq import Queue

    from pi_dispatch.fleet.enqueue import forge_job_options
    from pi_dispatch.testing.jobs import forge_job

    server = RedisServer(workdir)
    server.start()
    try:
        with one_worker(workdir, server.url):
            job = forge_job(1, trigger={"demoMemoryMb": 200})
            queue = Queue("pi-jobs", {"connection": server.url})
            try:
                options = {**forge_job_options("github", job), "jobId": "gh-oom"}
                await queue.add("github", job, options)
                deadline = time.monotonic() + 120
                while await queue.getJobState("gh-oom") not in ("completed", "failed"):
                    if time.monotonic() > deadline:
                        break
                    await asyncio.sleep(0.2)
                done = await queue.getJob("gh-oom")
            finally:
                await queue.close()
            records = [record for record in read_records(workdir / "mini1" / "logs") if record.get("jobId") == "gh-oom"]
    finally:
        server.stop()
    reason = records[-1].get("reason") if records else None
    attempts = done.attemptsMade if done is not None else None
    ok = reason == "job-oom-killed" and attempts == 1
    line = f"a job holding 200 MiB under a 64 MiB limit: recorded {reason}, attempts {attempts}" + (
        "" if ok else "  MISSED"
    )
    print(f"oom-job round {round_number}: {line}", flush=True)
    return Outcome([line], {"attempts spent": float(attempts or 0)}, ok)


async def unhealthy(workdir: Path, _sockets: int, round_number: int) -> Outcome:
    from bullmq import Queue

    from pi_dispatch.fleet.enqueue import forge_job_options
    from pi_dispatch.testing.jobs import forge_job

    read_only = workdir / "read-only"
    read_only.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(read_only)], check=True)
    server = RedisServer(workdir)
    server.start()
    ids = [f"gh-unhealthy-{number}" for number in range(12)]
    try:
        with one_worker(workdir, server.url) as fleet:
            fleet.start("sick", PI_JOBS_DIR=str(read_only))
            queue = Queue("pi-jobs", {"connection": server.url})
            try:
                for number, job_id in enumerate(ids):
                    job = forge_job(number)
                    await queue.add("github", job, {**forge_job_options("github", job), "jobId": job_id})
                deadline = time.monotonic() + 180
                states = {}
                while time.monotonic() < deadline:
                    states = {job_id: await queue.getJobState(job_id) for job_id in ids}
                    if all(state in ("completed", "failed") for state in states.values()):
                        break
                    await asyncio.sleep(0.5)
            finally:
                await queue.close()
            ran = {name: len(read_records(workdir / name / "logs")) for name in ("mini1", "sick")}
    finally:
        server.stop()
        subprocess.run(["umount", "-l", str(read_only)], check=False)
    failed = sum(1 for state in states.values() if state == "failed")
    completed = sum(1 for state in states.values() if state == "completed")
    ok = failed == 0 and completed == len(ids)
    line = (
        f"{len(ids)} jobs: {completed} completed, {failed} failed for good; records on the healthy host "
        f"{ran['mini1']}, on the unhealthy one {ran['sick']}" + ("" if ok else "  MISSED")
    )
    print(f"unhealthy round {round_number}: {line}", flush=True)
    return Outcome([line], {"jobs failed for good": float(failed)}, ok)


SPOOL_RATE_HZ = 20.0  # deliveries a second, each on a connection of its own
SPOOL_CALM_S, SPOOL_REFUSING_S, SPOOL_AFTER_S = 2.0, 10.0, 3.0


class ReceiverChild:
    """`pi-dispatch receiver` in a process of its own, as systemd runs it, its log in the scenario's folder."""

    def __init__(self, workdir: Path, env: dict[str, str], number: int) -> None:
        self.log = workdir / f"receiver-{number}.log"
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "pi_dispatch", "receiver"], env=env, cwd=workdir, stdout=out, stderr=out
            )

    def events(self, name: str) -> list[dict[str, object]]:
        lines = [line for line in self.log.read_text().splitlines() if line.startswith("{")]
        return [event for event in map(json.loads, lines) if event.get("event") == name]

    async def wait_for(self, name: str, timeout_s: float = 60) -> dict[str, object]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.process.poll() is None:
            if found := self.events(name):
                return found[-1]
            await asyncio.sleep(0.05)
        raise SystemExit(f"the receiver never said {name}; see {self.log}")

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(10)


@dataclass
class Flow:
    """Signed deliveries at SPOOL_RATE_HZ, numbered from `numbers`, each answer's status kept (0: none)."""

    port: int
    numbers: Iterator[int]
    answers: dict[int, int]

    async def _one(self, number: int) -> None:
        self.answers[number] = (await deliver(self.port, number))[1]

    async def run(self, seconds: float) -> None:
        sent = []
        for _ in range(int(seconds * SPOOL_RATE_HZ)):
            sent.append(asyncio.ensure_future(self._one(next(self.numbers))))
            await asyncio.sleep(1 / SPOOL_RATE_HZ)
        await asyncio.gather(*sent)


async def _outage(workdir: Path, base: int, spool_mb: int) -> tuple[dict[int, int], set[int], float]:
    """Deliveries at SPOOL_RATE_HZ while the store refuses every write for SPOOL_REFUSING_S (min-replicas-to-write
    with no replica), the receiver SIGKILLed and started again halfway through; then the store takes writes. The
    answers by delivery, the deliveries whose job is queued, and how long the spool took to drain."""
    import redis
    from footprint import fake_github, receiver_env

    server = RedisServer(workdir)
    server.start()
    admin = redis.Redis.from_url(server.url)
    answers: dict[int, int] = {}
    drained_s = 0.0
    try:
        with fake_github() as api:
            env = receiver_env(workdir, server.url, api) | {"WEBHOOK_SECRET": SECRET.decode()}
            env |= {"PI_RECEIVER_SPOOL_DIR": str(workdir / "spool"), "PI_RECEIVER_SPOOL_MAX_MB": str(spool_mb)}
            receiver = ReceiverChild(workdir, env, 1)
            await receiver.wait_for("receiver_started")
            flow = Flow(int(env["RECEIVER_PORT"]), itertools.count(base), answers).run
            await flow(SPOOL_CALM_S)
            admin.config_set("min-replicas-to-write", 1)
            await flow(SPOOL_REFUSING_S / 2)
            receiver.kill()
            receiver = ReceiverChild(workdir, env, 2)
            await receiver.wait_for("receiver_started")
            await flow(SPOOL_REFUSING_S / 2)
            admin.config_set("min-replicas-to-write", 0)
            back = time.monotonic()
            after = asyncio.ensure_future(flow(SPOOL_AFTER_S))  # deliveries go on meanwhile
            if spool_mb:
                await receiver.wait_for("spool_drained")
                drained_s = time.monotonic() - back
            await after
            deadline = time.monotonic() + 30
            while list((workdir / "spool").glob("*.json")) and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            receiver.kill()
    finally:
        queued = {number for number in answers if admin.exists(f"bull:pi-jobs:gh-f{number}")}
        admin.close()
        server.stop()
    return answers, queued, drained_s


async def spool(workdir: Path, _sockets: int, round_number: int) -> Outcome:
    """The outage with the spool, and the same outage with it off (PI_RECEIVER_SPOOL_MAX_MB=0: the reference's
    answer, 503) as the reference measured in the same run."""
    (workdir / "off").mkdir()
    off, off_queued, _ = await _outage(workdir / "off", round_number * 1_000_000, 0)
    answers, queued, drained_s = await _outage(workdir, round_number * 1_000_000 + 500_000, 64)
    accepted = {number for number, status in answers.items() if status == 202}
    refused = sum(1 for status in answers.values() if status == 503)
    unanswered = sum(1 for status in answers.values() if status == 0)
    lost = len(accepted - queued)
    off_refused = sum(1 for status in off.values() if status == 503)
    ok = lost == 0 and refused == 0
    line = (
        f"{len(answers)} deliveries, {SPOOL_REFUSING_S:g} s of refused writes with a receiver SIGKILLed: "
        f"{len(accepted)} answered 202, {refused} answered 503, {unanswered} unanswered; "
        f"{lost} answered 202 and not queued; the spool drained {drained_s:.1f} s after the store took writes. "
        f"Spool off (the reference's answer): {off_refused} of {len(off)} answered 503, {len(off_queued)} queued"
    ) + ("" if ok else "  MISSED")
    print(f"spool round {round_number}: {line}", flush=True)
    figures = {
        "deliveries answered 202 and lost": float(lost),
        "deliveries answered 503 with the spool": float(refused),
        "deliveries answered 503 with the spool off": float(off_refused),
        "seconds to drain the spool": drained_s,
    }
    return Outcome([line], figures, ok)


FULL_S = 30.0  # how long the store stays full
FULL_JOBS = 4


async def store_full(workdir: Path, _sockets: int, round_number: int) -> Outcome:
    """A worker running FULL_JOBS jobs of 20 s when the store fills up (maxmemory below its use, noeviction) for
    FULL_S; then memory is freed. What the issue saw: 3 of 4 jobs fenced and killed, exit 1 every 30 s, 2,020 error
    lines a minute."""
    import redis
    from bullmq import Queue

    from pi_dispatch.fleet.enqueue import forge_job_options
    from pi_dispatch.testing.jobs import forge_job

    server = RedisServer(workdir)
    server.start()
    admin = redis.Redis.from_url(server.url)
    ids = [f"gh-full-{round_number}-{number}" for number in range(FULL_JOBS)]
    states: dict[str, str] = {}
    try:
        with one_worker(workdir, server.url, PI_CONCURRENCY=str(FULL_JOBS), PI_LOCK_DURATION_MS="10000") as fleet:
            queue = Queue("pi-jobs", {"connection": server.url})
            try:
                for number, job_id in enumerate(ids):
                    job = forge_job(number, trigger={"demoSleep": 20})
                    await queue.add("github", job, {**forge_job_options("github", job), "jobId": job_id})
                while sum([await queue.getJobState(job_id) == "active" for job_id in ids]) < FULL_JOBS:
                    await asyncio.sleep(0.2)
                log_before = len((workdir / "mini1.log").read_text().splitlines())
                admin.config_set("maxmemory", 1)
                await asyncio.sleep(FULL_S)
                lines_full = len((workdir / "mini1.log").read_text().splitlines()) - log_before
                admin.config_set("maxmemory", 0)
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline:
                    states = {job_id: await queue.getJobState(job_id) for job_id in ids}
                    if all(state in ("completed", "failed") for state in states.values()):
                        break
                    await asyncio.sleep(0.5)
                attempts = [(await queue.getJob(job_id)).attemptsMade for job_id in ids]
            finally:
                await queue.close()
            restarts = len(fleet.restarts["mini1"])
            log = (workdir / "mini1.log").read_text()
    finally:
        admin.close()
        server.stop()
    fenced = log.count('"job_fenced"')
    completed = sum(1 for state in states.values() if state == "completed")
    once = sum(1 for made in attempts if made == 1)
    ok = fenced == 0 and restarts == 0 and completed == once == FULL_JOBS
    line = (
        f"{FULL_JOBS} running jobs, the store full for {FULL_S:g} s: {fenced} fenced, {completed} completed "
        f"({once} in one attempt), {restarts} worker restarts, {lines_full} log lines while full "
        f"({log.count('store_out_of_memory')} saying so)" + ("" if ok else "  MISSED")
    )
    print(f"store-full round {round_number}: {line}", flush=True)
    figures = {"running jobs fenced": float(fenced), "log lines a minute while full": lines_full * 60 / FULL_S}
    return Outcome([line], figures, ok)


SKEW_MS = 90_000  # the host ran 90 s ahead
SKEW_WATCH_S = 45.0
SKEW_JOBS = 24


async def clock_skew(workdir: Path, _sockets: int, round_number: int) -> Outcome:
    """A live host `prod` (the only one with the profile the jobs need) busy with a long job while SKEW_JOBS more
    wait on its own queue, and a host without the profile whose clock runs SKEW_MS ahead, for SKEW_WATCH_S; both
    re-home a silent host's queue after 10 s. What the issue saw: the skewed host took prod for dead, moved 24 jobs
    to the shared queue and failed 20 of them for good, and nothing warned."""
    from bullmq import Queue

    from pi_dispatch.config.worker_settings import load_settings
    from pi_dispatch.infra.clock import wall_ms
    from pi_dispatch.infra.events import Recorder
    from pi_dispatch.infra.valkey import fleet_id
    from pi_dispatch.testing.jobs import RESOLVER, forge_job, write_script
    from pi_dispatch.testing.services import worker_process_env
    from pi_dispatch.worker.lifecycle import Worker
    from pi_dispatch.worker.run.containers import ContainerRuntime

    server = RedisServer(workdir)
    server.start()
    resolver = write_script(workdir / "resolver", RESOLVER)
    rehome = {"PI_REHOME_AFTER_MS": "10000"}
    ids = [f"gh-skew-{round_number}-{number}" for number in range(SKEW_JOBS)]
    try:
        profile = {"PI_SECRET_PROFILES": f"prod:{resolver}", "PI_CONCURRENCY": "1"}
        with one_worker(workdir, server.url, "prod", **profile, **rehome) as fleet:
            own = Queue("pi-jobs@prod", {"connection": server.url})
            shared = Queue("pi-jobs", {"connection": server.url})
            try:
                long = forge_job(0, trigger={"demoSleep": 60}, secretsProfile="prod", secrets={"T": "ref-0"})
                await own.add("github", long, {"jobId": f"gh-skew-{round_number}-long", "attempts": 1})
                for number, job_id in enumerate(ids, start=1):
                    job = forge_job(number, secretsProfile="prod", secrets={"T": f"ref-{number}"})
                    await own.add("github", job, {"jobId": job_id, "attempts": 1})
                env = worker_process_env(workdir, server.url, fleet.image, "skewed", PI_CONCURRENCY="2", **rehome)
                settings = load_settings(environment=lambda: env)
                events = Recorder()
                runtime = ContainerRuntime.connect("skewed", 2, events, fleet_id(server.url))
                worker = Worker(settings, runtime, events, now=lambda: wall_ms() + SKEW_MS)
                stop = asyncio.Event()
                running = asyncio.ensure_future(worker.run(stop))
                await asyncio.sleep(SKEW_WATCH_S)
                stop.set()
                await asyncio.wait_for(running, 120)
                states = {job_id: await own.getJobState(job_id) for job_id in ids}
                moved = sum(1 for job_id in ids if states[job_id] == "unknown")  # gone from prod's queue
                failed = sum(1 for state in states.values() if state == "failed")
                failed += len(await shared.getJobs(["failed"]))
                said = "clock_skew" in events.names()
            finally:
                await own.close()
                await shared.close()
    finally:
        server.stop()
    ok = moved == 0 and failed == 0 and said
    line = (
        f"a host {SKEW_MS / 1000:g} s ahead beside a busy live host with {SKEW_JOBS} jobs waiting on its queue, "
        f"{SKEW_WATCH_S:g} s: {moved} moved off the live host's queue, {failed} failed for good, clock_skew said: "
        f"{'yes' if said else 'no'}" + ("" if ok else "  MISSED")
    )
    print(f"clock-skew round {round_number}: {line}", flush=True)
    return Outcome([line], {"jobs moved off a live host's queue": float(moved), "failed for good": float(failed)}, ok)


Scenario = Callable[[Path, int, int], Awaitable[Outcome]]
SCENARIOS: dict[str, Scenario] = {
    "store-reset": store_reset,
    "oom-job": oom_job,
    "unhealthy": unhealthy,
    "slowloris": slowloris,
    "spool": spool,
    "store-full": store_full,
    "clock-skew": clock_skew,
    "disk-full": disk_full,
    "wrong-policy": wrong_policy,
    "job-network": job_network,
}
GOALS = {
    "store-reset": f"every scheduler back within one beat ({BEAT_S:g} s)",
    "oom-job": "job-oom-killed, one attempt",
    "unhealthy": "0 jobs failed for good",
    "slowloris": f"worst legitimate latency <= {LATENCY_GOAL_S:g} s, every delivery 202",
    "spool": "0 deliveries answered 202 and lost, none answered 503",
    "store-full": "0 running jobs fenced, every one completed in one attempt, no restart",
    "clock-skew": "0 jobs moved off a live host's queue, 0 failed for good, the skew said",
    "disk-full": "0 completed jobs without a record after a full disk, a stop and a restart",
    "wrong-policy": "0 jobs run: the worker and the receiver refuse the store at boot (exit 2)",
    "job-network": "no job reaches the store's port (Docker's default bridge does)",
}


async def bench(rounds: int, only: list[str], sockets: int) -> int:
    failed = False
    for name in only:
        collected: dict[str, list[float]] = {}
        for round_number in range(1, rounds + 1):
            with tempfile.TemporaryDirectory() as scratch:
                outcome = await SCENARIOS[name](Path(scratch), sockets, round_number)
            for figure, value in outcome.figures.items():
                collected.setdefault(figure, []).append(value)
            failed |= not outcome.passed
        for figure, values in collected.items():
            print(
                f"{name}, {figure}: median {statistics.median(values):.2f} (range {min(values):.2f}-"
                f"{max(values):.2f} over {rounds} rounds; goal: {GOALS[name]})"
            )
    return 1 if failed else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", nargs="*", default=list(SCENARIOS), choices=list(SCENARIOS))
    parser.add_argument("--sockets", type=int, default=2000, help="slow sockets in the slowloris scenario")
    parser.add_argument("--serve", nargs=2, metavar=("PORT", "URL"), help=argparse.SUPPRESS)
    parser.add_argument("--attack", nargs=3, metavar=("PORT", "SOCKETS", "SOURCES"), help=argparse.SUPPRESS)
    parser.add_argument("--shared", help=argparse.SUPPRESS)  # ./dev bench passes its arguments to every script
    arguments = parser.parse_args()
    if arguments.serve:
        asyncio.run(serve(int(arguments.serve[0]), arguments.serve[1]))
        return
    if arguments.attack:
        attack(int(arguments.attack[0]), int(arguments.attack[1]), arguments.attack[2].split(","))
        return
    sys.exit(asyncio.run(bench(arguments.rounds, arguments.only, arguments.sockets)))


if __name__ == "__main__":
    main()
