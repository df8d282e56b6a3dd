"""Faults against real processes: does every job run, once at a time, and leave a record?

Real redis-server (persistent, so a restart keeps the queues), the machine's Docker daemon (a private dockerd
for the daemon-restart scenario), and real `pi-dispatch worker` processes. One line of figures per scenario:

    jobs enqueued | completed once | run twice (overlapping containers) | lost | records missing | recovery

Scenarios:
  dead-host      a named host SIGKILLed for good (its containers with it, as a machine dies) with jobs routed to
                 it, under the default settings: recovery is the time from its death until its last stranded job
                 runs elsewhere, against the goal of 3 minutes
  store-outage   Valkey stopped for three lock durations mid-run, then restarted: recovery from its return until
                 every job is done
  kill-twice     a worker SIGKILLed mid-job and restarted, twice (as systemd would, 10 s later): recovery from the
                 last restart until the job is done
  dockerd        a private dockerd (live-restore) restarted mid-job: recovery from its return until the job is done
  stuck          a named host's blocking connection to the store goes silent (half-open) while its heartbeat goes
                 on, under the default settings, with jobs routed all along: recovery from the stall until every
                 job is done; the note says when its row said stuck, when it exited 1, and where jobs were routed
                 meanwhile (none to it once its row said stuck)

Every figure must be 0 run twice, 0 lost, 0 records missing. Usage: python bench/chaos.py [--only NAME ...]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
from bullmq import Queue

from pi_dispatch.core.keys import host_row_key
from pi_dispatch.demo.jobimage import EXAMPLE_IMAGE, build_example_image
from pi_dispatch.demo.store import EmbeddedValkey
from pi_dispatch.fleet.enqueue import Enqueuer, ForgeRouter, registry_reader
from pi_dispatch.infra.store import StoreAddress
from pi_dispatch.infra.valkey import connect
from pi_dispatch.testing.fleetprocs import Fleet, Overlaps
from pi_dispatch.testing.jobs import RESOLVER, forge_job, write_script
from pi_dispatch.testing.services import PrivateDocker
from pi_dispatch.testing.stalling import StallingRelay
from pi_dispatch.worker.run.containers import LABEL_HOST

GOAL_S = 180.0


@dataclass
class Figures:
    name: str
    enqueued: int = 0
    completed_once: int = 0
    run_twice: int = 0
    lost: int = 0
    records_missing: int = 0
    recovery_s: float = float("nan")
    note: str = ""

    def line(self) -> str:
        return (
            f"{self.name:<13} enqueued {self.enqueued:>3} | completed once {self.completed_once:>3} | run twice "
            f"{self.run_twice} | lost {self.lost} | records missing {self.records_missing} | recovery "
            f"{self.recovery_s:6.1f} s{self.note}"
        )


@contextlib.contextmanager
def store(root: Path) -> Iterator[EmbeddedValkey]:
    server = EmbeddedValkey(root / "store", persist=True)
    (root / "store").mkdir()
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def states(url: str, queues: list[str], ids: list[str]) -> dict[str, str]:
    handles = [Queue(name, {"connection": url}) for name in queues]
    try:
        found = {}
        for job_id in ids:
            for handle in handles:
                state = await handle.getJobState(job_id)
                if state != "unknown":
                    found[job_id] = str(state)
                    break
            else:
                found[job_id] = "unknown"
        return found
    finally:
        for handle in handles:
            await handle.close()


async def settle(url: str, queues: list[str], ids: list[str], timeout_s: float) -> dict[str, str]:
    deadline = time.monotonic() + timeout_s
    while True:
        found = await states(url, queues, ids)
        if all(state in ("completed", "failed") for state in found.values()) or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.5)


def tally(figures: Figures, found: dict[str, str], overlaps: Overlaps, records: dict[str, Any]) -> Figures:
    figures.enqueued = len(found)
    figures.run_twice = sum(1 for job in found if overlaps.most.get(job, 0) > 1)
    figures.completed_once = sum(1 for job, state in found.items() if state == "completed" and overlaps.most[job] <= 1)
    figures.lost = sum(1 for state in found.values() if state != "completed")
    figures.records_missing = sum(1 for job, state in found.items() if state == "completed" and job not in records)
    return figures


async def enqueue(url: str, jobs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    client = connect(url)
    enqueuer = Enqueuer(StoreAddress(url), ForgeRouter(registry_reader(client)))
    try:
        placed = []
        for data in jobs:
            queue, job_id, _ = await enqueuer.enqueue_forge_job("github", data)
            placed.append((queue, job_id))
        return placed
    finally:
        await enqueuer.close()
        await client.aclose()


async def dead_host(root: Path, image: str) -> Figures:
    """Two named hosts serve prod and a third does not (so prod jobs are routed, not shared), under the default
    settings; one prod host dies for good, its containers with it."""
    resolver = write_script(root / "resolver", RESOLVER)
    figures = Figures("dead-host")
    with store(root) as server, Overlaps() as overlaps:
        fleet = Fleet(root, server.url, image, {"PI_CONCURRENCY": "2"})
        fleet.start("victim", PI_SECRET_PROFILES=f"prod:{resolver}")
        fleet.start("rescuer", PI_SECRET_PROFILES=f"prod:{resolver}")
        fleet.start("plain")
        await asyncio.sleep(2)  # both rows are live before routing
        jobs = [
            forge_job(n, secretsProfile="prod", trigger={"deliveryId": f"c-{n}", "demoSleep": 20}) for n in range(12)
        ]
        placed = await enqueue(server.url, jobs)
        stranded = [job_id for queue, job_id in placed if queue == "pi-jobs@victim"]
        await asyncio.sleep(5)  # the victim has two running and the rest waiting
        fleet.kill("victim", for_good=True)
        died = time.monotonic()
        docker_client = docker.from_env()
        for container in docker_client.containers.list(filters={"label": f"{LABEL_HOST}=victim"}):
            container.kill()  # the machine died: so did its containers
        docker_client.close()
        recovered = float("nan")
        deadline = died + 600
        while time.monotonic() < deadline:
            elsewhere = [job for job in stranded if overlaps.hosts.get(job, set()) - {"victim"}]
            if len(elsewhere) == len(stranded):
                recovered = time.monotonic() - died
                break
            await asyncio.sleep(0.5)
        queues = ["pi-jobs", "pi-jobs@victim", "pi-jobs@rescuer", "pi-jobs@plain"]
        found = await settle(server.url, queues, [job_id for _, job_id in placed], 300)
        fleet.stop_all()
        figures = tally(figures, found, overlaps, fleet.records())
        figures.recovery_s = recovered
        figures.note = f" ({len(stranded)} stranded; {recovered / GOAL_S:.2f}x the 3-minute goal)"
    return figures


async def store_outage(root: Path, image: str) -> Figures:
    figures = Figures("store-outage")
    with store(root) as server, Overlaps() as overlaps:
        fleet = Fleet(root, server.url, image, {"PI_LOCK_DURATION_MS": "5000"})
        fleet.start("one")
        fleet.start("two")
        jobs = [forge_job(n, trigger={"deliveryId": f"o-{n}", "demoSleep": 12}) for n in range(6)]
        placed = await enqueue(server.url, jobs)
        await asyncio.sleep(3)
        server.stop()
        await asyncio.sleep(15)  # three lock durations
        server.start()
        back = time.monotonic()
        found = await settle(server.url, ["pi-jobs"], [job_id for _, job_id in placed], 300)
        figures.recovery_s = time.monotonic() - back
        fleet.stop_all()
        figures = tally(figures, found, overlaps, fleet.records())
    return figures


async def kill_twice(root: Path, image: str) -> Figures:
    figures = Figures("kill-twice")
    with store(root) as server, Overlaps() as overlaps:
        fleet = Fleet(root, server.url, image)
        fleet.start("phoenix")
        fleet.start("bystander")
        placed = await enqueue(server.url, [forge_job(1, trigger={"deliveryId": "k-1", "demoSleep": 25})])
        job_id = placed[0][1]
        for kills in range(2):
            deadline = time.monotonic() + 120
            while "phoenix" not in overlaps.hosts.get(job_id, set()) and time.monotonic() < deadline:
                await asyncio.sleep(0.2)  # until phoenix runs it (again, after its restart)
            overlaps.hosts[job_id].discard("phoenix")
            fleet.kill("phoenix")  # the supervisor starts it again RESTART_S later, as systemd would
            while len(fleet.restarts["phoenix"]) <= kills:
                await asyncio.sleep(0.2)
        restarted = fleet.restarts["phoenix"][-1]
        found = await settle(server.url, ["pi-jobs"], [job_id], 300)
        figures.recovery_s = time.monotonic() - restarted
        fleet.stop_all()
        figures = tally(figures, found, overlaps, fleet.records())
    return figures


async def dockerd_restart(root: Path, image: str) -> Figures:
    figures = Figures("dockerd")
    daemon = PrivateDocker(root / "dockerd", live_restore=True)
    (root / "dockerd").mkdir()
    daemon.start()
    try:
        client = docker.DockerClient(base_url=daemon.url)
        build_example_image(client)
        client.close()
        with store(root) as server, Overlaps(daemon.url) as overlaps:
            fleet = Fleet(root, server.url, image, {"DOCKER_HOST": daemon.url, "PI_JOB_NETWORK": "none"})
            fleet.start("restarts")
            placed = await enqueue(server.url, [forge_job(1, trigger={"deliveryId": "d-1", "demoSleep": 20})])
            await asyncio.sleep(5)
            await asyncio.to_thread(daemon.restart)
            back = time.monotonic()
            found = await settle(server.url, ["pi-jobs"], [placed[0][1]], 300)
            figures.recovery_s = time.monotonic() - back
            fleet.stop_all()
            figures = tally(figures, found, overlaps, fleet.records())
    finally:
        daemon.close()
    return figures


async def stuck_consumer(root: Path, image: str) -> Figures:
    """Two named hosts serve prod and a third does not; the victim reaches the store through a relay that, at the
    stall, stops answering its blocking pops (its heartbeat, on another connection, goes on). Prod jobs are
    routed every two seconds until the victim has exited and been restarted."""
    resolver = write_script(root / "resolver", RESOLVER)
    figures = Figures("stuck")
    with store(root) as server, Overlaps() as overlaps:
        relay = StallingRelay(server.url)
        relayed = relay.start()
        fleet = Fleet(root, server.url, image, {"PI_CONCURRENCY": "2"})
        fleet.start("victim", VALKEY_URL=relayed, PI_SECRET_PROFILES=f"prod:{resolver}")
        fleet.start("rescuer", PI_SECRET_PROFILES=f"prod:{resolver}")
        fleet.start("plain")
        await asyncio.sleep(2)
        client = connect(server.url)
        relay.stall_blocking_pops()
        stalled = time.monotonic()
        flagged: float | None = None  # seconds from the stall until the row said stuck
        exited: float | None = None
        placed: list[tuple[str, str]] = []
        to_victim_after_flag = 0
        number = 0
        while not fleet.restarts["victim"] and time.monotonic() - stalled < 300:
            number += 1
            job = forge_job(number, secretsProfile="prod", trigger={"deliveryId": f"s-{number}", "demoSleep": 2})
            (queue, job_id), *_ = await enqueue(server.url, [job])
            placed.append((queue, job_id))
            if flagged is not None and queue == "pi-jobs@victim":
                to_victim_after_flag += 1
            if flagged is None and await client.hget(host_row_key("victim"), "consumer") == b"stuck":
                flagged = time.monotonic() - stalled
            if exited is None and fleet.processes["victim"].poll() == 1:
                exited = time.monotonic() - stalled
            await asyncio.sleep(2)
        queues = ["pi-jobs", "pi-jobs@victim", "pi-jobs@rescuer", "pi-jobs@plain"]
        found = await settle(server.url, queues, [job_id for _, job_id in placed], 300)
        figures.recovery_s = time.monotonic() - stalled
        await client.aclose()
        fleet.stop_all()
        relay.close()
        figures = tally(figures, found, overlaps, fleet.records())
        to_victim = sum(1 for queue, _ in placed if queue == "pi-jobs@victim")
        figures.note = (
            f" (row stuck after {flagged or float('nan'):.0f} s, exit 1 after {exited or float('nan'):.0f} s;"
            f" {to_victim} of {len(placed)} routed to"
            f" it, {to_victim_after_flag} once its row said stuck)"
        )
    return figures


SCENARIOS = {
    "dead-host": dead_host,
    "store-outage": store_outage,
    "kill-twice": kill_twice,
    "dockerd": dockerd_restart,
    "stuck": stuck_consumer,
}


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=sorted(SCENARIOS), default=list(SCENARIOS))
    arguments = parser.parse_args()
    client = docker.from_env()
    build_example_image(client)
    client.close()
    failed = False
    for name in arguments.only:
        with tempfile.TemporaryDirectory(prefix=f"pi-chaos-{name}-") as folder:
            figures = await SCENARIOS[name](Path(folder), EXAMPLE_IMAGE)
        print(figures.line(), flush=True)
        failed |= bool(figures.run_twice or figures.lost or figures.records_missing)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
