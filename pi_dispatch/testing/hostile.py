"""The hostile-input suite's machinery: generated hostile jobs, rows and records, run against the real services.

`tests/scenarios/test_hostile.py` runs it at CI size (a few hundred jobs, every shape) and `bench/hostile.py` at full
size (10,000); both print the same figures (inputs tried, refusals by reason, crashes, records lost, overwritten) and
require 0 crashes, 0 lost and 0 overwritten. The generators are seeded, so a failure is reproducible from its seed.
"""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import redis.asyncio as aioredis
from bullmq import Queue

from pi_dispatch.console.plaintext import plain
from pi_dispatch.core.capabilities import job_needs
from pi_dispatch.core.jscompat import js_string
from pi_dispatch.core.keys import HOST_LIVE, RUNS_INDEX, bull_key, host_row_key, run_record_key
from pi_dispatch.core.names import is_worker_name, record_stem
from pi_dispatch.core.routing import RouteTable
from pi_dispatch.fleet.registry import LiveHosts, read_live_hosts
from pi_dispatch.testing.jobs import forge_job
from pi_dispatch.worker.after.history import read_records_counted

# How a part runs an operator command: `pi-dispatch ARGS`, its exit code and output (in this process or a child)
CommandRunner = Callable[..., subprocess.CompletedProcess[str]]
SHAPES = 14  # the ways hostile_job bends a job, each met at least once in any run of SHAPES jobs or more
# The refusals every run of hostile_jobs must meet, or it proved nothing about that guard
GUARDS = (
    "job-too-large",
    "job-too-deep",
    "job-unreadable",
    "job-data-missing",
    "secret-bindings-too-many",
    "secret-reference-invalid",
    "job-target-invalid",
    "job-image-not-allowed",
)

NASTY = [
    "[/]",
    "[bold red]boom[/bold red]",
    "\x1b[2J\x1b[H\x1b]0;pwned\x07",
    "nul\x00byte",
    "-rf",
    "--privileged",
    "\u202eevil",
    "../../etc/passwd",
    "$(id)`id`",
    "%s%n{0}",
    "💥" * 40,
    "line\nbreak\r\n",
    "x" * 300,
]
IDS = [
    "gh-a/b",
    "gh-a_b",
    "gh-a:b",
    "gh-" + "L" * 300,
    "gh-" + "L" * 299 + "M",
    "..",
    "gh-ü",
    "gh-\u202e",
    "repeat:x:1",
]


def nasty(rng: random.Random) -> Any:
    return rng.choice([*NASTY, None, 0, -1, 1e308, True, [], {}, ["a", {"b": NASTY[0]}], {"[/]": "\x1b"}])


def nested(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = [value]
    return value


def _bend_field(rng: random.Random, job: dict[str, Any]) -> None:
    job[rng.choice(["kind", "repo", "flow", "target", "trigger", "image", "provider"])] = nasty(rng)


def _bend_trigger(rng: random.Random, job: dict[str, Any]) -> None:
    job["trigger"] = {"deliveryId": nasty(rng), "demoExit": rng.choice([0, 1, 2]), "matched": nasty(rng)}


def _bend_chain(rng: random.Random, job: dict[str, Any]) -> None:
    job.update({key: nasty(rng) for key in ("parentJobId", "chainDepth", "replica", "replicas", "maxTurns")})


# One way of bending a forge job per shape from 1; shape 0 is not a job at all, the last runs the job as it is.
BENDS: Final[tuple[Callable[[random.Random, dict[str, Any]], object], ...]] = (
    _bend_field,
    lambda rng, job: job.update(flow="x" * rng.choice([300_000, 1_000])),
    lambda rng, job: job.update(pad=["y" * 200_000] * rng.choice([12, 2])),
    lambda rng, job: job.update(flow=nested(rng.choice([40, 33, 10]))),
    lambda rng, job: job.update(
        secretsProfile="prod", secrets={f"S{i}": f"ref-{i}" for i in range(rng.choice([65, 3]))}
    ),
    lambda rng, job: job.update(
        secretsProfile="prod", secrets={"TOKEN": rng.choice(["-x", "a\x00b", "a\nb", "r" * 2_000, 7])}
    ),
    lambda rng, job: job.update(repo=rng.choice(["-rf", "evil\nrepo", "ok/repo"]), waitFor=[{"profile": "ci"}]),
    lambda rng, job: job.update(
        image=rng.choice(["busybox:latest", "--privileged", "pi-dispatch-example-job:latest", "x" * 300])
    ),
    lambda rng, job: job.update(
        waitFor=rng.choice([[{"profile": "ci"}] * 5, [{"after": NASTY[2]}], [{"profile": "-x"}], "soon"])
    ),
    _bend_trigger,
    _bend_chain,
    lambda rng, job: job.update(secretsProfile=rng.choice(["nowhere", "Prod", "../prod"]), secrets={"T": "r"}),
)


def hostile_job(rng: random.Random, number: int) -> Any:
    """One generated job: a real forge job bent one or more ways, or something that is not a job at all."""
    shape = number % SHAPES if number < SHAPES else rng.randrange(SHAPES)
    job = forge_job(number)
    if rng.random() < 0.6:
        job["image"] = "not-allowed:1"  # refused before a container: most jobs test the gates, few run
    if shape == 0:
        return nasty(rng)
    if shape <= len(BENDS):
        BENDS[shape - 1](rng, job)
    return job  # the last shape: as it is, to run a container now and then


@dataclass
class Figures:
    """What one part of the suite saw."""

    name: str
    tried: int = 0
    crashes: int = 0
    lost: int = 0
    overwritten: int = 0
    reasons: Counter[str] = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)

    def line(self) -> str:
        top = ", ".join(f"{reason} {count}" for reason, count in self.reasons.most_common(8))
        extra = f" | {'; '.join(self.notes)}" if self.notes else ""
        return (
            f"{self.name:<9} tried {self.tried:>6} | crashes {self.crashes} | lost {self.lost} | overwritten "
            f"{self.overwritten} | by reason: {top or '-'}{extra}"
        )


def unexpected(event: str, fields: Mapping[str, object]) -> bool:
    """A worker event that says our code met an exception it did not expect (taken for an infra fault)."""
    return (event == "job_failed" and "error" in fields) or event == "run_record_degraded"


async def settled(queue: Queue, ids: list[str], timeout_s: float) -> dict[str, str]:
    """Each job's state once every one has finished (or the time is up)."""
    deadline = time.monotonic() + timeout_s
    pending = set(ids)
    states: dict[str, str] = {}
    while pending and time.monotonic() < deadline:
        for job_id in list(pending)[:500]:
            state = str(await queue.getJobState(job_id))
            states[job_id] = state
            if state in ("completed", "failed"):
                pending.discard(job_id)
        await asyncio.sleep(0.2)
    return states


def account(figures: Figures, ids: list[str], states: dict[str, str], logs_dir: Path) -> None:
    """Every job finished and left its own record: count the ones that did not, or whose record another took."""
    records, skipped = read_records_counted(logs_dir, limit=len(ids) * 2 + 100)
    by_stem = {record_stem(record.get("jobId")): record for record in records}
    unfinished = [job_id for job_id in ids if states.get(job_id) not in ("completed", "failed")]
    figures.lost += len(unfinished)
    missing = [job_id for job_id in ids if record_stem(job_id) not in by_stem]
    if unfinished or missing:
        shown = [f"{plain(job_id, 40)} ({states.get(job_id)})" for job_id in (unfinished + missing)[:5]]
        figures.notes.append("not finished or unrecorded: " + ", ".join(shown))
    for job_id in ids:
        record = by_stem.get(record_stem(job_id))
        if record is None:
            figures.lost += 1
        elif js_string(record.get("jobId")) != job_id:
            figures.overwritten += 1
        else:
            figures.reasons[str(record.get("reason") or record.get("outcome"))] += 1
    if skipped:
        figures.notes.append(f"{skipped} record files unreadable")
    if len({record_stem(job_id) for job_id in ids}) != len(ids):
        figures.overwritten += len(ids) - len({record_stem(job_id) for job_id in ids})


async def hostile_jobs(queue: Queue, client: aioredis.Redis, count: int, seed: int = 7) -> list[str]:
    """Add count hostile jobs (colliding and over-long ids among them), plus three written raw: deeper than BullMQ
    can parse, and not JSON at all. Returns their ids."""
    rng = random.Random(seed)
    ids: list[str] = []
    for number in range(count):
        job_id = IDS[number] if number < len(IDS) else f"h-{seed}-{number}"
        await queue.add("github", hostile_job(rng, number), {"jobId": job_id, "attempts": 1})
        ids.append(job_id)
    for job_id, data in (("h-deep", "[" * 5_000 + "]" * 5_000), ("h-garbage", "{not json")):
        await queue.add("github", {"placeholder": True}, {"jobId": job_id, "attempts": 1, "delay": 1_000})
        await client.hset(bull_key(queue.name, job_id), "data", data)  # type: ignore[misc]  # a foreign writer's
        ids.append(job_id)
    await queue.add("github", {"placeholder": True}, {"jobId": "h-evicted", "attempts": 1, "delay": 1_000})
    await client.delete(bull_key(queue.name, "h-evicted"))  # as an evicting store drops it: its id still queued
    return [*ids, "h-evicted"]


def hostile_row(rng: random.Random, number: int, now_ms: int) -> tuple[str, dict[str, str]]:
    name = rng.choice([f"ok{number}", f"evil:{number}\x1b[2J", f"[/]{number}", f"a{number}" + "\u202e", ""])
    row = {
        "name": rng.choice([name, name, f"other{number}", "\x00"]),
        "beatAt": str(rng.choice([now_ms, now_ms + 3_600_000, now_ms - 1_000, "soon", ""])),
        "routes": rng.choice(["true", "false", "TRUE", "\x1b"]),
        "caps": rng.choice(["s:prod", "s:prod,w:ci", "s:[/]", "x" * 5_000, "\x1b[31m"]),
        "version": rng.choice(NASTY),
        "tz": rng.choice(NASTY),
    }
    return name or f"empty{number}", row


async def hostile_rows(client: aioredis.Redis, count: int, run_cli: CommandRunner, seed: int = 11) -> Figures:
    """count hostile rows through the registry reader, the router and `hosts`."""
    figures = Figures("rows", tried=count)
    rng = random.Random(seed)
    now_ms = int(time.time() * 1000)
    for number in range(count):
        member, row = hostile_row(rng, number, now_ms)
        await client.hset(host_row_key(member), mapping=row)  # type: ignore[misc]
        await client.sadd(HOST_LIVE, member)  # type: ignore[misc]
    live = await read_live_hosts(client)
    assert isinstance(live, LiveHosts)
    table = RouteTable.from_hosts(live.hosts)
    for number in range(200):
        host = table.route(job_needs({"secretsProfile": "prod"}), f"gh-{number}")
        if host is not None and not is_worker_name(host):
            figures.crashes += 1  # routed to a name no worker can have: a queue nobody drains
    figures.reasons.update({"valid": len(live.hosts), "invalid": len(live.invalid)})
    for args in (("hosts",), ("hosts", "--json"), ("hosts", "--json", "--queues")):
        shown = await asyncio.to_thread(run_cli, *args, "--valkey-url", _url(client))
        figures.crashes += shown.returncode != 0 or "Traceback" in shown.stderr or "\x1b" in shown.stdout
    return figures


async def hostile_records(
    client: aioredis.Redis, logs_dir: Path, count: int, run_cli: CommandRunner, seed: int = 13
) -> Figures:
    """count hostile mirrored records (and a few files) through `runs`."""
    figures = Figures("records", tried=count)
    rng = random.Random(seed)
    now_ms = int(time.time() * 1000)
    bodies: list[Callable[[int], str]] = [
        lambda n: json.dumps({"jobId": f"r-{n}", "host": NASTY[n % len(NASTY)], "outcome": "[/]", "endedAt": "x"}),
        lambda n: "[" * 3_000 + "]" * 3_000,
        lambda n: json.dumps([n, "not a record"]),
        lambda n: "{broken",
        lambda n: json.dumps({"jobId": nested(500), "reason": "\x1b[2J", "kind": {"[/]": 1}}),
        lambda n: json.dumps({"jobId": f"r-{n}", "endedAt": "2026-01-01T00:00:00.000Z", "host": "mini1"}),
    ]
    for number in range(count):
        body = rng.choice(bodies)(number)
        await client.set(run_record_key(f"r-{number}"), body)
        await client.zadd(RUNS_INDEX, {f"r-{number}": now_ms - number})
    logs_dir.mkdir(parents=True, exist_ok=True)
    (logs_dir / "deep.json").write_text("[" * 3_000 + "]" * 3_000)
    (logs_dir / "markup.json").write_text(json.dumps({"jobId": "[/]", "host": "\x1b[2J", "endedAt": 5}))
    for args in (("runs", "--limit", "1000", "--json"), ("runs", "--limit", "1000")):  # the first sees them all
        shown = await asyncio.to_thread(run_cli, *args, "--logs-dir", str(logs_dir), "--valkey-url", _url(client))
        figures.crashes += shown.returncode != 0 or "Traceback" in shown.stderr or "\x1b" in shown.stdout
        if "--json" in args and shown.returncode == 0:
            figures.reasons["skipped as malformed"] = json.loads(shown.stdout)["skipped"]
    return figures


def _url(client: aioredis.Redis) -> str:
    kwargs = client.connection_pool.connection_kwargs
    return f"redis://{kwargs['host']}:{kwargs['port']}/{kwargs.get('db', 0)}"
