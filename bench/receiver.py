"""Signed GitHub deliveries per second, end to end (HTTP in, job on its queue), against plain BullMQ Queue.add of
the same jobs with the same options, measured in the same run on one real redis-server.

The receiver runs in a process of its own (as it does in production) and answers each delivery only after
BullMQ has added its job, so a 202 is a job on its queue; the client posts pre-signed requests, CONCURRENCY at
a time. The baseline adds the jobs the receiver would add, CONCURRENCY at a time, from one process. Rounds
alternate; the median ratio is printed with its range. Target: at least 0.8x.

    python bench/receiver.py [--deliveries 2000] [--rounds 5] [--concurrency 32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pi_dispatch.core.jobs import forge_job_data
from pi_dispatch.demo.store import free_port
from pi_dispatch.fleet.enqueue import forge_job_options
from pi_dispatch.infra.store import StoreAddress
from pi_dispatch.receiver.auth import hub_signature
from pi_dispatch.testing.services import RedisServer

REPO = Path(__file__).resolve().parent.parent

SECRET = b"bench-webhook-secret"
TRIGGERS = {"triggers": [{"on": {"type": "label", "any": ["pi:fix"]}, "run": {"kind": "github", "flow": "fix"}}]}


def payload(number: int) -> dict[str, object]:
    return {
        "action": "labeled",
        "sender": {"id": 1, "login": "bench"},
        "label": {"name": "pi:fix"},
        "issue": {"number": number, "title": f"issue {number}", "body": "b", "labels": [{"name": "pi:fix"}]},
        "repository": {"full_name": "acme/app"},
    }


def job_of(number: int, delivery: str) -> dict[str, object]:
    """The job the receiver builds for payload(number), as its gate does."""
    return {
        "repo": "acme/app",
        "target": {"type": "issue", "number": number, "title": f"issue {number}", "body": "b"},
        "flow": "fix",
        "trigger": {
            "event": "issues",
            "action": "labeled",
            "deliveryId": delivery,
            "sender": {"id": 1},
            "matched": {"index": 0, "type": "label", "label": "pi:fix"},
        },
    }


async def serve(port: int, url: str) -> None:
    """The child: the product's receiver on 127.0.0.1:port, its identity stood in (GitHub user 999)."""
    from aiohttp import web

    from pi_dispatch.fleet.enqueue import Enqueuer, ForgeRouter, registry_reader
    from pi_dispatch.infra.events import discard
    from pi_dispatch.infra.valkey import connect
    from pi_dispatch.receiver.forges.authority import stood_in
    from pi_dispatch.receiver.forges.spec import Served
    from pi_dispatch.receiver.replay import ReplayGuard
    from pi_dispatch.receiver.rules import Rules
    from pi_dispatch.receiver.server import Receiver, application
    from pi_dispatch.testing.receiving import default_limits
    from pi_dispatch.triggers.file import parse_triggers

    rules = Rules.from_triggers(parse_triggers(json.dumps(TRIGGERS), "bench"))
    enqueuer = Enqueuer(StoreAddress(url), ForgeRouter(registry_reader(connect(url))))
    served = {"github": Served(SECRET, identity=999, resolver=stood_in("bench"))}
    receiver = Receiver(rules, enqueuer, discard, served, replays=ReplayGuard(connect(url)))  # as production serves
    runner = web.ServerRunner(application(receiver, default_limits()), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, backlog=1024).start()
    print("ready", flush=True)
    await asyncio.Event().wait()


async def bounded_gather(count: int, concurrency: int, one: object) -> None:
    queue: asyncio.Queue[int] = asyncio.Queue()
    for index in range(count):
        queue.put_nowait(index)

    async def drain() -> None:
        while not queue.empty():
            await one(queue.get_nowait())  # type: ignore[operator]

    await asyncio.gather(*(drain() for _ in range(concurrency)))


def request_bytes(base: int, count: int) -> list[bytes]:
    """Each delivery as the bytes of one HTTP/1.1 request, signed, ready to write."""
    found = []
    for index in range(count):
        number = base + index
        body = json.dumps(payload(number)).encode()
        head = (
            f"POST / HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            f"X-GitHub-Event: issues\r\nX-GitHub-Delivery: r{number}\r\n"
            f"X-Hub-Signature-256: {hub_signature(SECRET, body)}\r\n\r\n"
        )
        found.append(head.encode() + body)
    return found


async def connection(port: int, requests: list[bytes]) -> int:
    """One keep-alive connection sending its requests one after another; the number answered 202. Lean on
    purpose: the client shares this machine's cores with the receiver and the store it measures."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    answered = 0
    try:
        for request in requests:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = head.lower().split(b"content-length:", 1)[1].split(b"\r\n", 1)[0]
            await reader.readexactly(int(length))
            answered += head.startswith(b"HTTP/1.1 202")
    finally:
        writer.close()
    return answered


async def receiver_round(port: int, base: int, count: int, concurrency: int) -> float:
    """Deliveries per second over `concurrency` keep-alive connections, one request in flight on each (a server
    answers a connection's requests in order, so pipelining would not add concurrency)."""
    requests = request_bytes(base, count)
    shares = [requests[index::concurrency] for index in range(concurrency)]
    started = time.perf_counter()
    queued = await asyncio.gather(*(connection(port, share) for share in shares))
    elapsed = time.perf_counter() - started
    assert sum(queued) == count, f"{count - sum(queued)} deliveries were not queued"
    return count / elapsed


async def add_round(url: str, base: int, count: int, concurrency: int) -> float:
    from bullmq import Queue

    queue = Queue("pi-jobs", {"connection": url})
    jobs = []
    for index in range(count):
        job = job_of(base + index, f"a{base + index}")
        jobs.append((forge_job_data("github", job), forge_job_options("github", job)))

    async def add(index: int) -> None:
        data, options = jobs[index]
        await queue.add("github", data, options)

    try:
        await queue.add("github", *jobs[0])  # the connection and the scripts, loaded before the clock starts
        started = time.perf_counter()
        await bounded_gather(count, concurrency, add)
        return count / (time.perf_counter() - started)
    finally:
        await queue.close()


async def bench(deliveries: int, rounds: int, concurrency: int) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        server = RedisServer(Path(scratch))
        server.start()
        port = free_port()
        child = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(port), server.url], stdout=subprocess.PIPE, text=True
        )
        try:
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"
            await receiver_round(port, 10_000_000, 200, concurrency)  # warm both sides up
            ratios, hooks, adds = [], [], []
            for round_number in range(rounds):
                base = (round_number + 1) * 1_000_000
                add_rate = await add_round(server.url, base, deliveries, concurrency)
                hook_rate = await receiver_round(port, base + 500_000, deliveries, concurrency)
                hooks.append(hook_rate)
                adds.append(add_rate)
                ratios.append(hook_rate / add_rate)
                print(
                    f"round {round_number + 1}: receiver {hook_rate:7.0f}/s  Queue.add {add_rate:7.0f}/s  "
                    f"ratio {hook_rate / add_rate:.2f}x"
                )
            print(
                f"signed deliveries, HTTP in to job on its queue: median {statistics.median(hooks):.0f}/s; "
                f"plain Queue.add of the same jobs: median {statistics.median(adds):.0f}/s"
            )
            print(
                f"receiver / Queue.add: median {statistics.median(ratios):.2f}x "
                f"(range {min(ratios):.2f}x-{max(ratios):.2f}x over {rounds} rounds of {deliveries}, "
                f"{concurrency} in flight; target >= 0.8x)"
            )
        finally:
            child.terminate()
            child.wait(10)
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deliveries", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--serve", nargs=2, metavar=("PORT", "URL"), help=argparse.SUPPRESS)
    parser.add_argument("--shared", help=argparse.SUPPRESS)  # ./dev bench passes its arguments to every script
    arguments = parser.parse_args()
    if arguments.serve:
        asyncio.run(serve(int(arguments.serve[0]), arguments.serve[1]))
        return
    asyncio.run(bench(arguments.deliveries, arguments.rounds, arguments.concurrency))


if __name__ == "__main__":
    main()
