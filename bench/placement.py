"""Placement against the ideal pull schedule: real `pi-dispatch worker` processes, a real redis-server, real Docker.

Four named hosts with mixed capabilities and slots (A: prod, 2 slots; B: prod and ops, 2; C: nothing, 3; D: ops, 1)
and a batch of 40 jobs of known, uneven durations (20 need `prod`, 6 need `ops`, 14 need nothing), enqueued at once
(one after another, in about 50 ms, so the store's oldest-first order is the batch's) through the real router
(FNV-1a of the job id picks among the capable hosts; the rest go to `pi-jobs`). From the run records (each
attempt's start and end on its host) the bench computes, for the same measured durations, capabilities and slots,
the ideal pull schedule (a greedy list scheduler: whenever a slot is free it takes the oldest job its host can
serve) and prints measured / ideal for the makespan and for the mean and p95 queue wait (enqueue to attempt
start), with stealing on (this port's placement) and off (PI_STEAL=0 on every host: the seed's placement,
corrected only by slot-gated pickup) on the same jobs (ids, so routing, and durations), plus the capable
slot-seconds that idled while a job the host could run waited. A sampler reads every host's jobs in `active`
(BullMQ's `pb` says who took each) every 50 ms: no host may ever hold more than its slots.

Goal: with stealing on, makespan <= 1.10x ideal and mean wait <= 1.25x ideal; never over the slots.
Usage: python bench/placement.py [--runs N] [--jobs N]   (median of the runs, with the range)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import docker
import redis

from pi_dispatch.core.keys import SHARED_QUEUE, bull_key, host_queue_name, host_row_key
from pi_dispatch.demo.jobimage import EXAMPLE_IMAGE, build_example_image
from pi_dispatch.fleet.enqueue import Enqueuer, ForgeRouter, forge_job_options, registry_reader
from pi_dispatch.infra.store import StoreAddress
from pi_dispatch.infra.valkey import connect
from pi_dispatch.testing.jobs import RESOLVER, forge_job, write_script
from pi_dispatch.testing.services import RedisServer, worker_process_env
from pi_dispatch.worker.after.history import read_records

HOSTS = {"a": ({"prod"}, 2), "b": ({"prod", "ops"}, 2), "c": (set(), 3), "d": ({"ops"}, 1)}
GOAL_MAKESPAN, GOAL_WAIT = 1.10, 1.25
SAMPLE_S = 0.05


@dataclass(frozen=True)
class Job:
    delivery: str
    needs: frozenset[str]  # capability tokens, as the router sees them
    seconds: int  # what the container sleeps
    job_id: str = ""  # the id the enqueue gives it (from its delivery)


@dataclass
class Fleet:
    root: Path
    url: str
    image: str
    steal: bool
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self) -> None:
        for name, (profiles, slots) in HOSTS.items():
            resolver = write_script(self.root / "resolver", RESOLVER)
            env = worker_process_env(
                self.root,
                self.url,
                self.image,
                name,
                PI_CONCURRENCY=str(slots),
                PI_METRICS_ADDR="",
                PI_STEAL="1" if self.steal else "0",
                PI_SECRET_PROFILES=",".join(f"{profile}:{resolver}" for profile in sorted(profiles)),
            )
            log = (self.root / f"{name}.log").open("ab")
            self.processes[name] = subprocess.Popen(
                [sys.executable, "-m", "pi_dispatch", "worker"], env=env, stdout=log, stderr=log
            )
            log.close()
        store = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 60
        while not all(store.exists(host_row_key(name)) for name in HOSTS):
            if time.monotonic() > deadline:
                raise RuntimeError("the workers did not start: see " + str(self.root))
            time.sleep(0.2)
        store.close()

    def stop(self) -> None:
        for process in self.processes.values():
            process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(60)
            if process.poll() is None:
                process.kill()

    def records(self, job_ids: set[str]) -> dict[str, list[dict[str, Any]]]:
        found: dict[str, list[dict[str, Any]]] = {}
        for name in HOSTS:
            for record in read_records(self.root / name / "logs", limit=100_000):
                if record.get("jobId") in job_ids:
                    found.setdefault(str(record["jobId"]), []).append(record)
        return found


class Sampler:
    """Every 50 ms: the jobs in `active` on every queue, by the host BullMQ says took them (`pb`)."""

    def __init__(self, url: str) -> None:
        self.store = redis.Redis.from_url(url)
        self.most: dict[str, int] = dict.fromkeys(HOSTS, 0)
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.queues = [SHARED_QUEUE, *(host_queue_name(name) for name in HOSTS)]

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            with contextlib.suppress(redis.RedisError):
                pipe = self.store.pipeline(transaction=False)
                for queue in self.queues:
                    pipe.lrange(bull_key(queue, "active"), 0, -1)
                listed = pipe.execute()
                pipe = self.store.pipeline(transaction=False)
                for queue, ids in zip(self.queues, listed, strict=True):
                    for job_id in ids:
                        pipe.hget(bull_key(queue, job_id.decode()), "pb")
                held: dict[str, int] = {}
                for taker in pipe.execute():
                    if taker is not None:
                        held[taker.decode()] = held.get(taker.decode(), 0) + 1
                self.samples += 1
                for name, count in held.items():
                    self.most[name] = max(self.most.get(name, 0), count)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self.store.close()


def batch(label: str, count: int, seed: int) -> list[Job]:
    """Uneven durations, the same for both modes of a run: mostly short, some long."""
    rng = random.Random(seed)
    jobs = []
    for number in range(count):
        kind = number % 20
        needs = frozenset({"s:prod"}) if kind < 10 else frozenset({"s:ops"}) if kind < 13 else frozenset()
        seconds = rng.choice([2, 3, 4, 5, 6, 8, 10, 14, 18, 24])
        delivery = f"place-{label}-{number}"
        job_id = str(forge_job_options("github", {"trigger": {"deliveryId": delivery}})["jobId"])
        jobs.append(Job(delivery, needs, seconds, job_id))
    return jobs


def host_serves(name: str, needs: frozenset[str]) -> bool:
    return needs <= {f"s:{profile}" for profile in HOSTS[name][0]}


def ideal(jobs: Sequence[Job], durations: dict[str, float]) -> dict[str, tuple[float, float]]:
    """The greedy pull schedule: (start, end) per job, all jobs available at 0, oldest first."""
    free_at = [(0.0, name, slot) for name, (_, slots) in HOSTS.items() for slot in range(slots)]
    pending = list(jobs)
    schedule: dict[str, tuple[float, float]] = {}
    while pending:
        free_at.sort()
        now = free_at[0][0]
        ready = [slot for slot in free_at if slot[0] <= now]
        took = False
        for slot in ready:
            job = next((job for job in pending if host_serves(slot[1], job.needs)), None)
            if job is None:
                continue
            pending.remove(job)
            schedule[job.job_id] = (now, now + durations[job.job_id])
            free_at[free_at.index(slot)] = (now + durations[job.job_id], slot[1], slot[2])
            took = True
        if not took:  # every free slot here serves nothing left: they wait for the next slot to free
            later = sorted({slot[0] for slot in free_at if slot[0] > now})
            if not later:
                raise RuntimeError("a job no host can serve")
            free_at = [(max(slot[0], later[0]), slot[1], slot[2]) for slot in free_at]
    return schedule


def waits_of(schedule: dict[str, tuple[float, float]]) -> tuple[float, float, float]:
    """Makespan, mean wait and p95 wait of a schedule measured from the enqueue at 0."""
    starts = sorted(start for start, _ in schedule.values())
    makespan = max(end for _, end in schedule.values())
    p95 = starts[min(len(starts) - 1, int(0.95 * len(starts)))]
    return makespan, statistics.fmean(starts), p95


def idle_capable(jobs: Sequence[Job], schedule: dict[str, tuple[float, float]], hosts: dict[str, str]) -> float:
    """Capable slot-seconds idle: at each instant, per host, min(free slots, waiting jobs it could run)."""
    end = max(finish for _, finish in schedule.values())
    total, step, now = 0.0, 0.05, 0.0
    while now < end:
        for name, (_, slots) in HOSTS.items():
            busy = sum(
                1 for job_id, (start, finish) in schedule.items() if hosts[job_id] == name and start <= now < finish
            )
            waiting = sum(1 for job in jobs if schedule[job.job_id][0] > now and host_serves(name, job.needs))
            total += min(max(0, slots - busy), waiting) * step
        now += step
    return total


def job_data(job: Job, number: int) -> dict[str, Any]:
    """The forge job for one bench job: its own delivery and target (no dedup between runs), its needs, its sleep."""
    fields: dict[str, Any] = {"trigger": {"demoSleep": job.seconds, "deliveryId": job.delivery}}
    if job.needs:
        fields["secretsProfile"] = next(iter(job.needs)).split(":", 1)[1]
    data = forge_job(number, **fields)
    data["target"] = {**data["target"], "number": number}
    return data


async def enqueue(url: str, jobs: Sequence[Job], first_number: int) -> tuple[float, dict[str, str]]:
    """Every job through the real router at once; returns when they were enqueued and each one's queue."""
    client = connect(url)
    enqueuer = Enqueuer(StoreAddress(url), ForgeRouter(registry_reader(client)))
    started = time.time()
    try:  # one after another, so the store's oldest-first is the batch's order, as the ideal schedule has it
        placed = [
            await enqueuer.enqueue_forge_job("github", job_data(job, first_number + n)) for n, job in enumerate(jobs)
        ]
    finally:
        await enqueuer.close()
        await client.aclose()
    return started, {enqueued.job_id: enqueued.queue for enqueued in placed}


def one_run(fleet: Fleet, jobs: Sequence[Job], first_number: int) -> dict[str, Any]:
    with Sampler(fleet.url) as sampler:
        enqueued_at, placed = asyncio.run(enqueue(fleet.url, jobs, first_number))
        if set(placed) != {job.job_id for job in jobs}:
            raise RuntimeError("the enqueue gave other job ids than the bench expects")
        ids = {job.job_id for job in jobs}
        deadline = time.monotonic() + 900
        while len(found := fleet.records(ids)) < len(ids):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(ids) - len(found)} jobs never ran")
            time.sleep(0.5)
    runs = {job_id: records[-1] for job_id, records in found.items()}
    twice = sum(1 for records in found.values() if len(records) > 1)

    def at(text: str) -> float:
        return datetime.fromisoformat(text).timestamp() - enqueued_at

    measured = {job_id: (at(run["startedAt"]), at(run["endedAt"])) for job_id, run in runs.items()}
    durations = {job_id: end - start for job_id, (start, end) in measured.items()}
    best = ideal(jobs, durations)
    hosts = {job_id: str(run["host"]) for job_id, run in runs.items()}
    makespan, mean_wait, p95 = waits_of(measured)
    best_makespan, best_mean, best_p95 = waits_of(best)
    over = {name: most for name, most in sampler.most.items() if most > HOSTS[name][1]}
    routed = {queue: sum(1 for q in placed.values() if q == queue) for queue in sorted(set(placed.values()))}
    return {
        "makespan": makespan / best_makespan,
        "mean_wait": mean_wait / best_mean if best_mean else float("nan"),
        "p95_wait": p95 / best_p95 if best_p95 else float("nan"),
        "makespan_s": makespan,
        "ideal_makespan_s": best_makespan,
        "idle_capable_s": idle_capable(jobs, measured, hosts),
        "over_slots": float(len(over)),
        "samples": float(sampler.samples),
        "stolen": float(sum(1 for run in runs.values() if run.get("routedTo"))),
        "twice": float(twice),
        "routed": routed,
    }


def summary(values: Sequence[float]) -> str:
    return f"{statistics.median(values):5.2f} ({min(values):.2f}-{max(values):.2f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=40)
    args = parser.parse_args()
    build_example_image(docker.from_env())
    results: dict[bool, list[dict[str, Any]]] = {True: [], False: []}
    with tempfile.TemporaryDirectory(prefix="pi-placement-") as folder:
        root = Path(folder)
        (root / "redis").mkdir()
        server = RedisServer(root / "redis")
        server.start()
        try:
            for steal in (True, False):
                fleet = Fleet(root / ("steal" if steal else "seed"), server.url, EXAMPLE_IMAGE, steal)
                fleet.root.mkdir()
                fleet.start()
                try:
                    for run in range(args.runs):  # the same jobs (ids, so routing, and durations) in both modes
                        figures = one_run(fleet, batch(str(run), args.jobs, seed=1000 + run), run * args.jobs)
                        results[steal].append(figures)
                        print(
                            f"  run {run + 1} stealing {'on ' if steal else 'off'}: makespan "
                            f"{figures['makespan_s']:.1f} s (ideal {figures['ideal_makespan_s']:.1f} s) | "
                            f"stolen {figures['stolen']:.0f} | idle capable {figures['idle_capable_s']:.0f} slot-s | "
                            f"routed {figures['routed']}",
                            flush=True,
                        )
                finally:
                    fleet.stop()
                    store = redis.Redis.from_url(server.url)
                    store.flushdb()  # the next mode starts from an empty store, so it may reuse the job ids
                    store.close()
        finally:
            server.stop()
    print(f"\nplacement: {args.jobs} jobs on 4 hosts (8 slots), median of {args.runs} runs (range)")
    print(f"{'':28}{'stealing on':>22}{'stealing off (seed)':>24}")
    for key, label in (
        ("makespan", "makespan / ideal"),
        ("mean_wait", "mean wait / ideal"),
        ("p95_wait", "p95 wait / ideal"),
        ("idle_capable_s", "idle capable slot-s"),
        ("stolen", "jobs stolen"),
        ("twice", "jobs run twice"),
        ("over_slots", "hosts ever over slots"),
    ):
        on = summary([figures[key] for figures in results[True]])
        off = summary([figures[key] for figures in results[False]])
        print(f"{label:<28}{on:>22}{off:>24}")
    stealing = results[True]
    met = (
        statistics.median(f["makespan"] for f in stealing) <= GOAL_MAKESPAN
        and statistics.median(f["mean_wait"] for f in stealing) <= GOAL_WAIT
        and all(f["over_slots"] == 0 and f["twice"] == 0 for figures in results.values() for f in figures)
    )
    verdict = "met" if met else "MISSED"
    print(f"goal (makespan <= {GOAL_MAKESPAN}x, mean wait <= {GOAL_WAIT}x, never over slots): {verdict}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
