"""The scenarios of bench/faults.py about what a worker keeps and what a job reaches (the issue's items 4, 8 and 9),
with what every scenario shares: its outcome and one real worker process.

  disk-full     20 jobs of 2 s on a worker whose logs disk (a 1 MiB tmpfs) fills up once 4 have completed; the
                worker is stopped with the disk full, started again, then the disk is freed. Figure: completed jobs
                without a record once everything settled (goal: 0), and the records kept in the store meanwhile
  wrong-policy  a store set to maxmemory-policy allkeys-lru holding 5 accepted jobs; a worker and a receiver are
                started on it. Figure: jobs run (goal: 0, both refused at boot with exit 2, every job still queued)
  job-network   a store listening on this host's own address (as inventory.example binds it); a job container
                on the job network `pi-dispatch job-network` makes, and the same container on Docker's default
                bridge (the reference's network, measured in the same run). Figure: whether each reached the
                store's port (goal: no, where the default bridge does)
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pi_dispatch.core.keys import run_spill_key
from pi_dispatch.core.names import record_stem
from pi_dispatch.demo.store import free_port
from pi_dispatch.testing.fleetprocs import Fleet
from pi_dispatch.testing.services import RedisServer, worker_process_env
from pi_dispatch.worker.after.history import read_records
from pi_dispatch.worker.gates.jobnetwork import IPTABLES, denied_ranges, rules_for


@dataclass
class Outcome:
    lines: list[str]
    figures: dict[str, float]
    passed: bool


@contextlib.contextmanager
def one_worker(workdir: Path, url: str, name: str = "mini1", **extra: str) -> Iterator[Fleet]:
    """A real `pi-dispatch worker` process (mini1 unless named) on the store at url, with the example job image."""
    fleet = Fleet(workdir, url, example_image(), extra)
    fleet.start(name)
    try:
        yield fleet
    finally:
        fleet.stop_all()


def example_image() -> str:
    import docker

    from pi_dispatch.demo.jobimage import build_example_image

    client = docker.from_env()
    try:
        return build_example_image(client)
    finally:
        client.close()


async def add_jobs(queue: Any, ids: list[str], **trigger: int) -> None:
    """A GitHub job for each id on queue, as the receiver enqueues it."""
    from pi_dispatch.fleet.enqueue import forge_job_options
    from pi_dispatch.testing.jobs import forge_job

    for number, job_id in enumerate(ids):
        job = forge_job(number, trigger=trigger)
        await queue.add("github", job, {**forge_job_options("github", job), "jobId": job_id})


def report(name: str, round_number: int, line: str, figures: dict[str, float], ok: bool) -> Outcome:
    line += "" if ok else "  MISSED"
    print(f"{name} round {round_number}: {line}", flush=True)
    return Outcome([line], figures, ok)


DISK_JOBS, DISK_FILLED_AFTER = 20, 4


@contextlib.contextmanager
def small_disk(folder: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs at folder (root: `./dev bench` runs as root); yields the file that fills it once written."""
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)], check=True)
    try:
        yield folder / ".filler"
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(filler: Path) -> None:
    with filler.open("wb") as out, contextlib.suppress(OSError):
        while True:
            out.write(b"\0" * 65_536)
            out.flush()


async def disk_full(workdir: Path, _sockets: int, round_number: int) -> Outcome:
    """What the issue saw: a worker stopped while its logs disk was full lost 10 of 20 completed jobs' records."""
    import redis
    from bullmq import Queue

    server = RedisServer(workdir)
    server.start()
    admin = redis.Redis.from_url(server.url)
    ids = [f"gh-disk-{round_number}-{number}" for number in range(DISK_JOBS)]
    states: dict[str, str] = {}
    try:
        with (
            small_disk(workdir / "logs") as filler,
            one_worker(workdir, server.url, PI_LOGS_DIR=str(filler.parent), PI_CONCURRENCY="2") as fleet,
        ):
            queue = Queue("pi-jobs", {"connection": server.url})
            try:
                await add_jobs(queue, ids, demoSleep=2)
                await until(lambda: len(read_records(filler.parent)) >= DISK_FILLED_AFTER, 120)
                fill(filler)
                await until(lambda: spilled(admin) > 0, 60)
                await asyncio.sleep(2)
                fleet.buried.add("mini1")  # stopped as systemd stops it, not restarted by the supervisor
                fleet.processes["mini1"].send_signal(signal.SIGTERM)
                fleet.processes["mini1"].wait(120)
                kept = spilled(admin)
                fleet.buried.discard("mini1")
                fleet.start("mini1")  # the disk still full
                await asyncio.sleep(3)
                filler.unlink()
                deadline = time.monotonic() + 240
                while time.monotonic() < deadline:
                    states = {job_id: str(await queue.getJobState(job_id)) for job_id in ids}
                    left = spilled(admin)
                    if left == 0 and all(state in ("completed", "failed") for state in states.values()):
                        break
                    await asyncio.sleep(0.5)
            finally:
                await queue.close()
            recorded = {record_stem(record.get("jobId")) for record in read_records(filler.parent)}
    finally:
        admin.close()
        server.stop()
    completed = [job_id for job_id, state in states.items() if state == "completed"]
    unrecorded = sum(1 for job_id in completed if record_stem(job_id) not in recorded)
    ok = unrecorded == 0 and kept > 0 and len(completed) == DISK_JOBS
    line = (
        f"{DISK_JOBS} jobs, the logs disk full after {DISK_FILLED_AFTER}, the worker stopped and started again: "
        f"{kept} records kept in the store at the stop; {len(completed)} completed, {unrecorded} of them "
        f"without a record once the disk had room"
    )
    return report("disk-full", round_number, line, {"completed jobs without a record": float(unrecorded)}, ok)


def spilled(admin: Any) -> int:
    """The records the worker keeps in the store because its disk refused them."""
    return int(admin.hlen(run_spill_key("mini1")))


async def until(condition: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        await asyncio.sleep(0.2)


POLICY_JOBS = 5


async def wrong_policy(workdir: Path, _sockets: int, round_number: int) -> Outcome:
    """What the issue saw: under allkeys-lru, 224 of 300 accepted jobs evicted and 10 run with no target."""
    import redis
    from bullmq import Queue
    from footprint import fake_github, receiver_env

    server = RedisServer(workdir)
    server.start()
    admin = redis.Redis.from_url(server.url)
    try:
        admin.config_set("maxmemory-policy", "allkeys-lru")
        queue = Queue("pi-jobs", {"connection": server.url})
        try:
            await add_jobs(queue, [f"gh-lru-{number}" for number in range(POLICY_JOBS)])
            worker_env = worker_process_env(workdir, server.url, example_image(), "mini1")
            with fake_github() as api:
                children = {
                    "worker": subprocess.run(
                        [sys.executable, "-m", "pi_dispatch", "worker"], env=worker_env, capture_output=True,
                        text=True, timeout=120, check=False,
                    ),
                    "receiver": subprocess.run(
                        [sys.executable, "-m", "pi_dispatch", "receiver"], env=receiver_env(workdir, server.url, api),
                        capture_output=True, text=True, timeout=120, check=False,
                    ),
                }  # fmt: skip
            waiting = await queue.getJobCountByTypes("waiting")
        finally:
            await queue.close()
    finally:
        admin.close()
        server.stop()
    ran = len(read_records(workdir / "mini1" / "logs"))
    refused = [name for name, child in children.items() if child.returncode == 2 and "maxmemory-policy" in child.stderr]
    ok = ran == 0 and len(refused) == len(children) and waiting == POLICY_JOBS
    codes = ", ".join(f"{name} exit {child.returncode}" for name, child in children.items())
    line = (
        f"a store with allkeys-lru and {POLICY_JOBS} accepted jobs: {codes} ({len(refused)} of {len(children)} "
        f"naming maxmemory-policy); {ran} jobs run, {waiting} still queued"
    )
    return report("wrong-policy", round_number, line, {"jobs run under the wrong policy": float(ran)}, ok)


def host_address() -> str:
    """This host's own address on its default route (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.200", 9))
        return str(probe.getsockname()[0])


def store_answer(client: Any, image: str, network: str, address: str, port: int) -> str:
    """What a job container on network reads from the store's port within 3 s: the store's answer to PING, or nc's
    error."""
    probe = f"printf 'PING\\r\\n' | nc -w 3 {address} {port} 2>&1; true"
    output = client.containers.run(
        image, [probe], entrypoint=["/bin/busybox", "sh", "-c"], network=network, remove=True
    )
    return str(output.decode(errors="replace")).strip()


async def job_network(workdir: Path, _sockets: int, round_number: int) -> Outcome:
    """What the issue saw: on the default bridge, a job reaches the host's own addresses, so the store's port."""
    import docker

    redis_server = shutil.which("redis-server") or "redis-server"
    address, port = host_address(), free_port()
    password = secrets.token_hex(16)
    store = subprocess.Popen(
        [redis_server, "-"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=workdir
    )  # its password on stdin, never on a command line
    assert store.stdin is not None
    store.stdin.write(f'port {port}\nbind {address}\nrequirepass {password}\nsave ""\n'.encode())
    store.stdin.close()
    suffix = secrets.token_hex(3)
    name, bridge = f"pi-jobs-b{suffix}", f"pijb{suffix}"
    client = docker.from_env()
    command = [sys.executable, "-m", "pi_dispatch", "job-network", "--name", name, "--bridge", bridge]
    try:
        made = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
        if made.returncode != 0:
            raise SystemExit(f"job-network: {made.stdout}{made.stderr}")
        image = example_image()
        await asyncio.sleep(0.5)  # the store listening
        seen = {net: store_answer(client, image, net, address, port) for net in (name, "bridge")}
    finally:
        store.terminate()
        store.wait(10)
        for rule in rules_for(bridge, denied_ranges()):  # the rules job-network added, and only those
            subprocess.run([*IPTABLES, "-D", rule.chain, *rule.spec], capture_output=True, check=False)
        for network in client.networks.list(names=[name]):
            with contextlib.suppress(Exception):
                network.remove()
        client.close()
    reached = {net: "NOAUTH" in answer or "PONG" in answer for net, answer in seen.items()}
    ok = not reached[name] and reached["bridge"]
    line = (
        f"the store on this host's address {address}: a job on the job network "
        f"{'reached' if reached[name] else 'did not reach'} its port ({seen[name][:80] or 'no answer'}); the same "
        f"job on Docker's default bridge {'reached' if reached['bridge'] else 'did not reach'} it "
        f"({seen['bridge'][:80] or 'no answer'})"
    )
    return report("job-network", round_number, line, {"jobs that reached the store's port": float(reached[name])}, ok)


if __name__ == "__main__":  # `./dev bench` runs every script here: these scenarios run from bench/faults.py
    print("scenarios of bench/faults.py (python bench/faults.py --only disk-full wrong-policy job-network)")
