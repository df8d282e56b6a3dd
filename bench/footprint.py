"""Idle footprint: the resident memory of a worker and a receiver, each against the plainest thing that does its job,
measured in the same run on one real redis-server.

- a `pi-dispatch worker` (named, idle, Docker connected, as its unit starts it) against a plain Python BullMQ
  worker on the same two queues;
- a `pi-dispatch receiver` (GitHub, its identity answered by a local fake of the API's `GET /user`) against a bare
  aiohttp server with one BullMQ queue;
- and, for what the worker cannot shed, the resident memory of importing BullMQ alone and with the Docker SDK (the
  libraries the worker runs on), and with pydantic-settings too (which only the child that checks the worker's
  settings loads, `config/handover.py`).
- the worker again beside a registry of ROWS simulated hosts (`bench/scale.py`'s, beating), read after SETTLE_ROWS_S
  (two beats): as most workers run, another host holding the re-home sweep's lease; and as the one that holds it
  (it reads the whole registry's snapshot each sweep).
Each process is started ROUNDS times and read after SETTLE_S; the median and range are printed, and the ratio of the
medians. Goals (issues 24, 38 and 54): the worker idle under 1.4x of the plain BullMQ worker, and +5 MB at most
from no rows to ROWS; the receiver within 1.3x of its anchor. A worker loads what it does not use at idle only once
it uses it: the egress parts with PI_EGRESS on, the Sentinels' probes and watch for a replicated store, the triggers
parser and file watch with a triggers file, the operator's limits view with metrics on.

    python bench/footprint.py [--rounds 3] [--rows 5000]
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from pi_dispatch.demo.jobimage import EXAMPLE_IMAGE
from pi_dispatch.demo.store import free_port
from pi_dispatch.testing.services import PLAIN_BULLMQ_WORKER, RedisServer, rss_mb, worker_process_env

SETTLE_S = 12.0
SETTLE_ROWS_S = 40.0
BARE_RECEIVER = """
import asyncio, sys
from aiohttp import web
from bullmq import Queue
async def main():
    queue = Queue("pi-jobs", {"connection": sys.argv[1]})
    async def hook(request):
        await queue.add("github", await request.json())
        return web.Response(status=202)
    app = web.Application()
    app.router.add_post("/github", hook)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", int(sys.argv[2])).start()
    await asyncio.Event().wait()
asyncio.run(main())
"""
IMPORTS = {
    "bullmq": "import bullmq",
    "+ docker": "import bullmq, docker",
    "+ pydantic-settings": "import bullmq, docker, pydantic_settings",
}


class FakeGitHub(http.server.BaseHTTPRequestHandler):
    """`GET /user`: the token's user, which is all the receiver asks at boot."""

    def do_GET(self) -> None:
        body = json.dumps({"id": 999, "login": "bench"}).encode()
        self.send_response(200 if self.path == "/user" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        return


@contextlib.contextmanager
def fake_github() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeGitHub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def settled_rss(
    command: list[str], env: dict[str, str] | None = None, log: Path | None = None, settle_s: float = SETTLE_S
) -> float:
    """The process's resident memory once it has idled `settle_s`; it must still be running then."""
    out = log.open("wb") if log is not None else subprocess.DEVNULL
    process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        time.sleep(settle_s)
        if process.poll() is not None:
            raise SystemExit(f"{command[:4]} ended with {process.returncode}; see {log}")
        return rss_mb(process.pid)
    finally:
        process.terminate()
        process.wait(60)


def settled_rss_quick(command: list[str]) -> float:
    """An import's resident memory: read while the process sleeps after it."""
    process = subprocess.Popen(command)
    try:
        time.sleep(SETTLE_S / 8)
        return rss_mb(process.pid)
    finally:
        process.terminate()
        process.wait(30)


def beside_rows(root: Path, url: str, count: int, name: str, *, sweeper: bool) -> float:
    """A worker's settled memory beside `count` simulated hosts; unless `sweeper`, another host holds the re-home
    sweep's lease (one worker of a fleet sweeps; the others never read the whole registry)."""
    import redis
    from scale import Simulator  # bench/scale.py's registry of beating hosts, a job waiting on each one's queue

    from pi_dispatch.core.keys import REHOME_LEASE

    store = redis.Redis.from_url(url)
    store.flushdb()
    if not sweeper:
        store.set(REHOME_LEASE, "another-host", px=int(SETTLE_ROWS_S * 3000))
    env = worker_process_env(root, url, EXAMPLE_IMAGE, name, PI_METRICS_ADDR="")
    with Simulator(url, count):
        figure = settled_rss([sys.executable, "-m", "pi_dispatch", "worker"], env, root / f"{name}.log", SETTLE_ROWS_S)
    store.flushdb()
    store.close()
    return figure


def receiver_env(root: Path, url: str, api: str) -> dict[str, str]:
    triggers = root / "triggers.json"
    rule = {"on": {"type": "label", "any": ["pi:fix"]}, "run": {"kind": "github", "flow": "fix"}}
    triggers.write_text(json.dumps({"triggers": [rule]}))
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(root),
        "VALKEY_URL": url,
        "PI_TRIGGERS_FILE": str(triggers),
        "WEBHOOK_SECRET": "bench-secret",
        "RECEIVER_PORT": str(free_port()),
        "GITHUB_API_URL": api,
        "GITHUB_AUTH_SOURCE": "pat",
        "GITHUB_PAT": "bench-token",
        "PI_RECEIVER_HEALTH_ADDR": "",
        "PI_RECEIVER_SPOOL_DIR": str(root / "spool"),
    }


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):6.1f} MB ({min(values):.1f}-{max(values):.1f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows", type=int, default=5_000)
    args = parser.parse_args()
    python = sys.executable
    figures: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="pi-footprint-") as folder, fake_github() as api:
        root = Path(folder)
        (root / "redis").mkdir()
        server = RedisServer(root / "redis")
        server.start()
        try:
            for number in range(args.rounds):
                worker = worker_process_env(root, server.url, EXAMPLE_IMAGE, f"idle{number}", PI_METRICS_ADDR="")
                runs = {
                    "worker": ([python, "-m", "pi_dispatch", "worker"], worker),
                    "plain BullMQ worker": ([python, "-c", PLAIN_BULLMQ_WORKER, server.url], None),
                    "receiver": ([python, "-m", "pi_dispatch", "receiver"], receiver_env(root, server.url, api)),
                    "bare aiohttp + Queue": ([python, "-c", BARE_RECEIVER, server.url, str(free_port())], None),
                }
                for name, (command, env) in runs.items():
                    log = root / f"{name.split()[0]}-{number}.log"
                    figures.setdefault(name, []).append(settled_rss(command, env, log))
                rows = f"worker, {args.rows:,} rows"
                for sweeper in (False, True):
                    figures.setdefault(rows + (", sweeper" if sweeper else ""), []).append(
                        beside_rows(root, server.url, args.rows, f"rows{number}", sweeper=sweeper)
                    )
                for name, code in IMPORTS.items():
                    command = [python, "-c", f"{code}\nimport time; time.sleep({SETTLE_S / 4})"]
                    figures.setdefault(f"import {name}", []).append(settled_rss_quick(command))
        finally:
            server.stop()
    for name, values in figures.items():
        print(f"{name:28} {spread(values)}")
    worker, plain = statistics.median(figures["worker"]), statistics.median(figures["plain BullMQ worker"])
    receiver, bare = statistics.median(figures["receiver"]), statistics.median(figures["bare aiohttp + Queue"])
    print(f"\nworker / plain BullMQ worker: {worker / plain:.3f}x")
    for name, values in figures.items():
        if name.startswith("worker, "):
            print(f"{name} / worker alone: +{statistics.median(values) - worker:.1f} MB")
    print(f"receiver / bare aiohttp + Queue: {receiver / bare:.3f}x")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
