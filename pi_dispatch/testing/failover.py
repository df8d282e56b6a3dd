"""A replicated store failing over under load, one round: three `redis-server` and three Sentinels on loopback
(`pi_dispatch.testing.replicated`), two real `pi-dispatch worker` processes on the machine's Docker and the product's
receiver in a process of its own (this module, run with `--serve PORT`), all finding the primary through the
Sentinels; signed GitHub deliveries flow at a steady rate before, during and after the fault:

  kill      the primary SIGKILLed
  failover  a manual failover (SENTINEL FAILOVER) with the old primary still reachable by every client
  cut       the primary cut off from its replicas and Sentinels (an iptables rule), still reachable by clients,
            and joined back once another is promoted

`bench/failover.py` runs every scenario for several rounds and prints the figures; `tests/scenarios/test_failover.py`
runs one round of one scenario and holds it to the same goals: nothing acknowledged lost, no job run twice at once,
no record missing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pi_dispatch.core.keys import SHARED_QUEUE
from pi_dispatch.demo.store import free_port
from pi_dispatch.infra.valkey import STORE_FAULTS, outages_named
from pi_dispatch.receiver.auth import hub_signature
from pi_dispatch.testing.fleetprocs import Fleet, Overlaps
from pi_dispatch.testing.replicated import ReplicatedStore

SCENARIOS = ("kill", "failover", "cut", "freeze")
FREEZE_S = 10.0  # a frozen primary wakes after the promotion, before the Sentinels demote it
SECRET = b"bench-webhook-secret"
TRIGGERS = {"triggers": [{"on": {"type": "label", "any": ["pi:fix"]}, "run": {"kind": "github", "flow": "fix"}}]}
WARM_S = 4.0  # deliveries before the fault
AFTER_S = 8.0  # deliveries after the promotion
GAP_GOAL_S = 5.0
BACKLOG = 24  # deliveries sent at once just before the fault, so work waits while the store fails over
BACKLOG_BASE = 1_000_000
KEEP_LOGS = bool(os.environ.get("BENCH_KEEP"))


async def serve(port: int) -> None:
    """The child: the product's receiver on 127.0.0.1:port over the store its environment names (GitHub user 999
    stands in for the forge's identity call)."""
    from aiohttp import web

    from pi_dispatch.fleet.enqueue import Enqueuer, store_router
    from pi_dispatch.infra.primarywatch import primary_watch_loops
    from pi_dispatch.infra.store import store_from_environ
    from pi_dispatch.infra.supervise import Supervisor
    from pi_dispatch.receiver.forges.authority import stood_in
    from pi_dispatch.receiver.forges.spec import Served
    from pi_dispatch.receiver.replay import ReplayGuard
    from pi_dispatch.receiver.rules import Rules
    from pi_dispatch.receiver.server import Receiver, application
    from pi_dispatch.testing.receiving import default_limits
    from pi_dispatch.triggers.file import parse_triggers

    def refusals(event: str, fields: Mapping[str, object]) -> None:
        """Why a delivery was refused, on stderr (the round's receiver.log); with BENCH_KEEP, every delivery."""
        if event == "enqueue_failed" or KEEP_LOGS:
            said = fields.get("reason") or fields.get("jobId") or ""
            print(f"{time.monotonic():.2f} {event} {fields.get('delivery')} {said}", file=sys.stderr, flush=True)

    store = store_from_environ()
    rules = Rules.from_triggers(parse_triggers(json.dumps(TRIGGERS), "bench"))
    enqueuer = Enqueuer(store, store_router(store.client()))
    served = {"github": Served(SECRET, identity=999, resolver=stood_in("bench"))}
    receiver = Receiver(rules, enqueuer, refusals, served, replays=ReplayGuard(store.client()))  # as production
    runner = web.ServerRunner(application(receiver, default_limits()), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    Supervisor(refusals).start(*primary_watch_loops(store, refusals))  # as `pi-dispatch receiver` runs it
    print("ready", flush=True)
    await asyncio.Event().wait()


def delivery(number: int) -> bytes:
    body = json.dumps(
        {
            "action": "labeled",
            "sender": {"id": 1, "login": "bench"},
            "label": {"name": "pi:fix"},
            "issue": {"number": number, "title": f"issue {number}", "body": "b", "labels": [{"name": "pi:fix"}]},
            "repository": {"full_name": "acme/app"},
        }
    ).encode()
    head = (
        f"POST / HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        f"X-GitHub-Event: issues\r\nX-GitHub-Delivery: f{number}\r\nConnection: close\r\n"
        f"X-Hub-Signature-256: {hub_signature(SECRET, body)}\r\n\r\n"
    )
    return head.encode() + body


@dataclass
class Deliveries:
    """Deliveries at a steady rate, each on a connection of its own with a deadline: who got 202, and when others
    did not."""

    port: int
    rate: float
    acknowledged: list[int] = field(default_factory=list)
    refused_at: list[float] = field(default_factory=list)
    sent: int = 0

    async def one(self, number: int) -> None:
        try:
            async with asyncio.timeout(10):
                reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
                writer.write(delivery(number))
                status = await reader.readline()
                writer.close()
        except (OSError, TimeoutError):
            status = b""
        if status.startswith(b"HTTP/1.1 202"):
            self.acknowledged.append(number)
        else:
            self.refused_at.append(time.monotonic())

    async def flow(self, stop: asyncio.Event) -> None:
        pending = set()
        while not stop.is_set():
            self.sent += 1
            task = asyncio.ensure_future(self.one(self.sent))
            pending.add(task)
            task.add_done_callback(pending.discard)
            await asyncio.sleep(1 / self.rate)
        if pending:
            await asyncio.gather(*pending)


@dataclass
class Figures:
    scenario: str
    acknowledged: int = 0
    lost: int = 0
    run_twice: int = 0
    records_missing: int = 0
    gap_s: float = float("nan")
    refusal_s: float = 0.0
    refused: int = 0
    unsettled: int = 0

    def line(self) -> str:
        return (
            f"{self.scenario:<9} acknowledged {self.acknowledged:>3} | acked but lost {self.lost} | run twice at once "
            f"{self.run_twice} | records missing {self.records_missing} | worker gap {self.gap_s:4.1f} s | refused "
            f"{self.refused} over {self.refusal_s:4.1f} s"
            + (f" | {self.unsettled} unsettled" if self.unsettled else "")
        )


async def job_states(store: ReplicatedStore, job_ids: list[str]) -> dict[str, str]:
    """Each job's state on the primary now (every job here is on the shared queue: none needs a profile)."""
    from bullmq import Queue

    queue = Queue(SHARED_QUEUE, {"connection": store.address().queue_connection()})
    try:
        with outages_named():  # BullMQ's client raises redis-py's errors
            return {job_id: str(await queue.getJobState(job_id)) for job_id in job_ids}
    finally:
        with contextlib.suppress(*STORE_FAULTS), outages_named():
            await queue.close()


async def settled(store: ReplicatedStore, job_ids: list[str], timeout_s: float = 180) -> dict[str, str]:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            found = await job_states(store, job_ids)
        except STORE_FAULTS:  # a store still settling: asked again
            found = {}
        if found and all(state in ("completed", "failed", "unknown") for state in found.values()):
            return found
        if time.monotonic() > deadline:
            return found
        await asyncio.sleep(1)


async def fault(scenario: str, store: ReplicatedStore) -> tuple[float, float]:
    """Do the scenario's fault; return when it began and when another primary was promoted."""
    old = store.primary()
    began = time.monotonic()
    if scenario == "kill":
        store.kill(old)
    elif scenario == "failover":
        store.failover()
    elif scenario == "freeze":
        assert old.process is not None
        old.process.send_signal(signal.SIGSTOP)
    else:
        store.cut_off(old)
    while True:
        try:
            if store.primary() is not old:
                promoted = time.monotonic()
                break
        except RuntimeError:
            pass
        await asyncio.sleep(0.05)
    if scenario == "cut":
        await asyncio.sleep(3)  # clients go on reaching the cut-off primary for a while
        store.heal()  # and then it rejoins, to be demoted by the Sentinels
    if scenario == "freeze":  # it wakes still taking writes as the primary, until the Sentinels demote it
        await asyncio.sleep(max(0.0, began + FREEZE_S - time.monotonic()))
        assert old.process is not None
        old.process.send_signal(signal.SIGCONT)
    return began, promoted


async def one_round(scenario: str, rate: float, image: str) -> Figures:
    figures = Figures(scenario)
    scratch = tempfile.mkdtemp(prefix="pi-dispatch-failover-")
    with ReplicatedStore(min_replicas_to_write=1) as store:
        root = Path(scratch)
        env = {"PI_CONCURRENCY": "2", **store.env()}
        port = free_port()
        with (root / "receiver.log").open("ab") as receiver_log:
            child = subprocess.Popen(
                [sys.executable, "-m", __name__, "--serve", str(port)],
                env={**_base_env(), **store.env()},
                stdout=subprocess.PIPE,
                stderr=receiver_log,
            )
        fleet = Fleet(root, store.env()["VALKEY_URL"], image, env)
        try:
            assert child.stdout is not None and child.stdout.readline().strip() == b"ready"
            with Overlaps(fleet=store.address().fleet_id()) as overlaps:
                fleet.start("one")
                fleet.start("two")
                deliveries, stop = Deliveries(port, rate), asyncio.Event()
                flowing = asyncio.ensure_future(deliveries.flow(stop))
                await asyncio.sleep(WARM_S)
                await asyncio.gather(*(deliveries.one(BACKLOG_BASE + n) for n in range(BACKLOG)))  # work waits
                began, promoted = await fault(scenario, store)
                await asyncio.sleep(AFTER_S)
                stop.set()
                await flowing
                job_ids = [f"gh-f{number}" for number in deliveries.acknowledged]
                if KEEP_LOGS:
                    print(f"  fault at {began:.2f}, promoted at {promoted:.2f}; logs kept in {root}", flush=True)
                found = await settled(store, job_ids)
                figures.acknowledged = len(job_ids)
                lost = [job_id for job_id in job_ids if found.get(job_id, "unknown") == "unknown"]
                figures.lost = len(lost)
                if KEEP_LOGS and lost:
                    print(f"  acked but lost: {' '.join(lost)}", flush=True)
                figures.unsettled = sum(
                    1 for state in found.values() if state not in ("completed", "failed", "unknown")
                )
                figures.run_twice = sum(1 for job_id in job_ids if overlaps.most.get(job_id, 0) > 1)
                records = fleet.records()
                figures.records_missing = sum(
                    1 for job_id, state in found.items() if state == "completed" and job_id not in records
                )
                starts = [
                    min((t for t in times if t >= promoted), default=float("inf"))
                    for times in overlaps.first_seen_by_host().values()
                ]
                figures.gap_s = max(starts) - promoted if starts else float("nan")
                refused = [t for t in deliveries.refused_at if t >= promoted - 30]
                figures.refused = len(deliveries.refused_at)
                figures.refusal_s = max(refused) - min(refused) if refused else 0.0
        finally:
            fleet.stop_all()
            child.terminate()
            child.wait(10)
            if child.stdout is not None:
                child.stdout.close()
            if not KEEP_LOGS:
                shutil.rmtree(scratch, ignore_errors=True)
    return figures


def _base_env() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if not key.startswith(("VALKEY_", "PI_"))}


def _serve_main() -> None:
    parser = argparse.ArgumentParser(description="the product's receiver for a failover round")
    parser.add_argument("--serve", type=int, required=True)
    asyncio.run(serve(parser.parse_args().serve))


if __name__ == "__main__":
    _serve_main()
