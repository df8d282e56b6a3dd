"""The operator commands' reads: the registry, host queues and mirror, each read once and bounded; routed enqueue."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from redis.exceptions import RedisError

from pi_dispatch.core.errors import PiDispatchError
from pi_dispatch.core.keys import SHARED_QUEUE
from pi_dispatch.fleet.backlog import BACKLOG_READ
from pi_dispatch.fleet.hosts import HostQueue
from pi_dispatch.fleet.mirror import MirroredRuns, merge_runs, read_mirrored_runs
from pi_dispatch.fleet.queueview import read_queues
from pi_dispatch.fleet.registry import LiveHosts, Unreachable, read_live_hosts
from pi_dispatch.fleet.rehome import known_host_queues
from pi_dispatch.fleet.steal import Waiting
from pi_dispatch.infra.clock import wall_ms
from pi_dispatch.infra.valkey import DEFAULT_VALKEY_URL, connect, describe, with_password
from pi_dispatch.worker.history import read_records_counted


def valkey_url(option: str | None) -> str:
    """--valkey-url, else VALKEY_URL, else the default. The password only ever comes from VALKEY_PASSWORD."""
    return option or os.environ.get("VALKEY_URL") or DEFAULT_VALKEY_URL


async def with_client(url: str, use: Callable[[Any], Any]) -> Any:
    client = connect(url, os.environ.get("VALKEY_PASSWORD") or None)
    try:
        return await use(client)
    finally:
        await client.aclose()


def read_registry(url: str) -> LiveHosts | Unreachable:
    return asyncio.run(with_client(url, read_live_hosts))  # type: ignore[no-any-return]


@dataclass(frozen=True)
class FleetRead:
    """The registry; each named host's queue with since when its host is silent; the oldest jobs waiting on
    every queue (`fleet/backlog.py`). The last two are empty when the store could not give them."""

    live: LiveHosts | Unreachable
    host_queues: list[HostQueue]
    waiting: list[Waiting]


async def _fleet(client: Any) -> FleetRead:
    live = await read_live_hosts(client)
    if not isinstance(live, LiveHosts):
        return FleetRead(live, [], [])
    try:
        names = await known_host_queues(client, live.hosts)
        read = await read_queues(client, [SHARED_QUEUE, *names], live.hosts, wall_ms(), backlog=BACKLOG_READ)
        return FleetRead(live, read.queues[1:], read.waiting)
    except (RedisError, OSError, TimeoutError):
        return FleetRead(live, [], [])


def read_fleet(url: str) -> FleetRead:
    return asyncio.run(with_client(url, _fleet))  # type: ignore[no-any-return]


def read_mirror(url: str, limit: int) -> MirroredRuns:
    return asyncio.run(with_client(url, lambda client: read_mirrored_runs(client, limit=limit)))  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Enqueue:
    """What `enqueue` did: `added`, or not (`exists`: the id is already in a queue; `duplicate`: the dedup window
    kept another job), where, and why."""

    result: str
    queue: str
    job_id: str
    why: str
    state: str | None = None  # an existing job's state
    duplicate_of: str | None = None

    def as_json(self) -> dict[str, object]:
        return {"added": self.result == "added", **asdict(self)}


def enqueue_job(url: str, kind: str, data: dict[str, Any]) -> Enqueue:
    """Route and add one forge job, unless its id is already in a queue. A bad delivery is a ConfigError."""
    from pi_dispatch.core.capabilities import explain_route
    from pi_dispatch.core.errors import ConfigError, Problem
    from pi_dispatch.core.jobs import JobIdError
    from pi_dispatch.fleet.enqueue import Enqueuer, ForgeRouter, forge_job_options, registry_reader
    from pi_dispatch.fleet.locate import candidate_queues, locate

    async def run(client: Any) -> Enqueue:
        job_id = str(forge_job_options(kind, data)["jobId"])
        snapshot = await read_live_hosts(client)
        hosts = snapshot.hosts if isinstance(snapshot, LiveHosts) else []
        if found := await locate(client, job_id, candidate_queues(hosts)):
            there = found[0]
            return Enqueue("exists", there.queue, job_id, f"already {there.state} there", state=there.state)
        router = ForgeRouter(registry_reader(client))
        enqueuer = Enqueuer(with_password(url, os.environ.get("VALKEY_PASSWORD")), router)
        try:
            enqueued = await enqueuer.enqueue_forge_job(kind, data)
        finally:
            await enqueuer.close()
        queue = enqueued.queue
        if enqueued.deduplicated:
            why = f"a duplicate of {enqueued.kept} (same target and flow within 10 minutes)"
            return Enqueue("duplicate", queue, job_id, why, duplicate_of=enqueued.kept)
        explanation = explain_route(hosts, data, job_id)
        if explanation.host is not None:
            why = f"needs {', '.join(explanation.needs)}; chosen by job-id hash among the capable named hosts"
            return Enqueue("added", queue, job_id, why)
        return Enqueue("added", queue, job_id, str(explanation.abstention))

    try:
        return asyncio.run(with_client(url, run))  # type: ignore[no-any-return]
    except JobIdError as error:
        raise ConfigError([Problem("job", str(error), kind, "give the job data a trigger.deliveryId")]) from error
    except (RedisError, OSError, TimeoutError) as error:
        raise PiDispatchError(f"the job was not enqueued: Valkey said {describe(error)}") from error


def merged_runs(logs_dir: Path, url: str, limit: int, host: str | None) -> tuple[list[Any], str, int]:
    """This host's record files merged with the fleet mirror, how far to trust the mirror, and how many records
    were skipped as unreadable."""
    mirrored = read_mirror(url, limit)
    local, skipped = read_records_counted(logs_dir)
    runs = merge_runs(local, mirrored.runs, limit=limit if host is None else 10 * limit)
    if host is not None:
        runs = [run for run in runs if run.get("host") == host][:limit]
    return runs, mirrored.degraded, skipped + mirrored.skipped


def run_store(url: str | None, use: Callable[[Any], Any]) -> Any:
    """One command's store work, with a store that cannot be reached said in one line (exit 1)."""
    try:
        return asyncio.run(with_client(valkey_url(url), use))
    except (RedisError, OSError, TimeoutError) as error:
        raise PiDispatchError(f"Valkey could not be read: {describe(error)}") from error


def job_attempts(logs_dir: Path, url: str, job_id: str) -> list[Any]:
    """Every attempt of one job: the fleet's list in the store, else this host's own."""
    from pi_dispatch.core.names import record_stem
    from pi_dispatch.fleet.jobhistory import read_attempts
    from pi_dispatch.worker.history import read_attempt_records

    stored = run_store(url, lambda client: read_attempts(client, record_stem(job_id)))
    return list(stored) or read_attempt_records(logs_dir, job_id)
