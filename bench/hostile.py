"""Hostile input against the real services, at full size: 10,000 generated jobs through a real `pi-dispatch worker`
process (colliding and over-long job ids among them), 1,000 hostile registry rows through the router and `hosts`,
1,000 hostile mirrored records through `runs`. Prints one line of figures per part (inputs tried, crashes, records
lost, overwritten, refusals by reason); exits 1 unless every part shows 0 crashes, 0 lost and 0 overwritten.

The generators are the test suite's (`pi_dispatch.testing.hostile`, seeded): `tests/scenarios/test_hostile.py` runs a
few hundred of the same jobs in CI, with the full-disk part. A crash here is a worker that exited or restarted, or
logged an exception our code did not expect (`job_failed` with an error, `run_record_degraded`).

    python bench/hostile.py [--jobs 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import docker
from bullmq import Queue

from pi_dispatch.demo.jobimage import build_example_image
from pi_dispatch.infra.valkey import connect
from pi_dispatch.testing.fleetprocs import Fleet
from pi_dispatch.testing.hostile import (
    GUARDS,
    Figures,
    account,
    hostile_jobs,
    hostile_records,
    hostile_rows,
    settled,
    unexpected,
)
from pi_dispatch.testing.jobs import RESOLVER, forge_job, write_script
from pi_dispatch.testing.services import RedisServer


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """`pi-dispatch ARGS` in a child process, as an operator runs it."""
    return subprocess.run(
        [sys.executable, "-m", "pi_dispatch", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "200"},
        check=False,
    )


def unexpected_in(log: Path) -> list[dict[str, object]]:
    """The worker's logged events that say our code met an exception it did not expect."""
    found = []
    for line in log.read_text(errors="replace").splitlines():
        try:
            fields = json.loads(line)
        except ValueError:
            continue
        if isinstance(fields, dict) and unexpected(str(fields.get("event")), fields):
            found.append(fields)
    return found


async def jobs_part(root: Path, url: str, image: str, count: int) -> Figures:
    resolver = write_script(root / "resolver", RESOLVER)
    check = write_script(root / "check", "#!/bin/sh\nexit 0\n")
    figures = Figures("jobs", tried=count + 3)
    fleet = Fleet(root, url, image, {"PI_CONCURRENCY": "8", "PI_JOB_TIMEOUT_MS": "20000"})
    queue = Queue("pi-jobs", {"connection": url})
    client = connect(url)
    try:
        fleet.start("target", PI_SECRET_PROFILES=f"prod:{resolver}", PI_WAIT_PROFILES=f"ci:{check}")
        started = time.monotonic()
        ids = await hostile_jobs(queue, client, count)
        states = await settled(queue, ids, timeout_s=600 + count / 2)  # a ceiling only a hang reaches
        after = await queue.add("github", forge_job(1), {"jobId": "gh-still-works"})
        still = await settled(queue, [str(after.id)], timeout_s=120)
        figures.notes.append(f"{len(ids)} settled in {time.monotonic() - started:.0f} s")
    finally:
        fleet.stop_all()
        await queue.close()
        await client.aclose()
    worker = fleet.processes["target"]
    figures.crashes += sum(len(times) for times in fleet.restarts.values()) + (worker.returncode not in (0, None))
    figures.crashes += still.get("gh-still-works") != "completed"
    failures = unexpected_in(root / "target.log")
    figures.crashes += len(failures)
    account(figures, ids, states, root / "target" / "logs")
    missing = [reason for reason in GUARDS if not figures.reasons[reason]]
    if missing:
        figures.notes.append(f"guards never met: {', '.join(missing)}")
    return figures


async def main(count: int) -> int:
    daemon = docker.from_env()
    try:
        image = build_example_image(daemon)
    finally:
        daemon.close()
    with tempfile.TemporaryDirectory(prefix="pi-dispatch-hostile-") as folder:
        root = Path(folder)
        server = RedisServer(root / "store")
        (root / "store").mkdir()
        server.start()
        try:
            jobs = await jobs_part(root, server.url, image, count)
            print(jobs.line(), flush=True)
            client = connect(server.url)
            try:
                await client.flushdb()
                rows = await hostile_rows(client, 1_000, cli)
                print(rows.line(), flush=True)
                records = await hostile_records(client, root / "records", 1_000, cli)
                print(records.line(), flush=True)
            finally:
                await client.aclose()
        finally:
            server.stop()
    parts = (jobs, rows, records)
    held = all((part.crashes, part.lost, part.overwritten) == (0, 0, 0) for part in parts)
    return 0 if held and not any("never met" in note for note in jobs.notes) else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    sys.exit(asyncio.run(main(parser.parse_args().jobs)))
