"""The operator commands' reads: the registry, host queues and mirror, each read once and bounded; routed enqueue."""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from redis.exceptions import RedisError

from pi_dispatch.config.kinds import VALKEY_URL
from pi_dispatch.console.fleetread import FleetRead, read_fleet_state
from pi_dispatch.core.errors import ConfigError, PiDispatchError, Problem
from pi_dispatch.core.storeusers import reads_configuration
from pi_dispatch.fleet.mirror import MirroredRuns, merge_runs, read_mirrored_runs
from pi_dispatch.fleet.registry import LiveHosts, Unreachable, read_live_hosts
from pi_dispatch.fleet.snapshot import registry_now
from pi_dispatch.infra.store import StoreAddress, store_from_environ
from pi_dispatch.infra.valkey import describe
from pi_dispatch.worker.after.history import read_records_counted


def store_address(option: str | None) -> StoreAddress:
    """The store from --valkey-url, else VALKEY_URL, else the default, and the Sentinels VALKEY_SENTINELS names,
    as the worker reads them. Passwords only ever come from the environment (VALKEY_PASSWORD,
    VALKEY_SENTINEL_PASSWORD)."""
    url, source = (option, "--valkey-url") if option else (os.environ.get("VALKEY_URL"), "environment")
    if url and re.fullmatch(VALKEY_URL, url) is None:
        fix = "a URL such as redis://127.0.0.1:6379/0, rediss://store.lan:6380 or unix:///run/valkey/valkey.sock"
        raise ConfigError([Problem("VALKEY_URL", "is not a redis://, rediss:// or unix:// URL", source, fix)])
    try:
        return store_from_environ(os.environ, option)
    except ValueError as error:
        fix = "host:port entries separated by commas, such as store1:26379,store2:26379"
        raise ConfigError([Problem("VALKEY_SENTINELS", str(error), source="environment", fix=fix)]) from None


async def with_client(store: StoreAddress, use: Callable[[Any], Any]) -> Any:
    client = store.client()
    try:
        return await use(client)
    finally:
        await client.aclose()


def read_registry(store: StoreAddress) -> LiveHosts | Unreachable:
    return asyncio.run(with_client(store, registry_now))  # type: ignore[no-any-return]


def read_fleet(store: StoreAddress) -> FleetRead:
    """The fleet, with the store's configuration when the user it logs in as may read it."""

    async def read(client: Any) -> FleetRead:
        return await read_fleet_state(client, store, configuration=reads_configuration(store.username))

    return asyncio.run(with_client(store, read))  # type: ignore[no-any-return]


def read_mirror(store: StoreAddress, limit: int) -> MirroredRuns:
    return asyncio.run(with_client(store, lambda client: read_mirrored_runs(client, limit=limit)))  # type: ignore[no-any-return]


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


def enqueue_job(store: StoreAddress, kind: str, data: dict[str, Any]) -> Enqueue:
    """Route and add one forge job, unless its id is already in a queue. A bad delivery is a ConfigError."""
    from pi_dispatch.core.jobs import JobIdError
    from pi_dispatch.core.routing import explain_route
    from pi_dispatch.fleet.enqueue import Enqueuer, forge_job_options, store_router
    from pi_dispatch.fleet.locate import candidate_queues, locate

    async def run(client: Any) -> Enqueue:
        job_id = str(forge_job_options(kind, data)["jobId"])
        snapshot = await read_live_hosts(client)
        hosts = snapshot.hosts if isinstance(snapshot, LiveHosts) else []
        if found := await locate(client, job_id, candidate_queues(hosts)):
            there = found[0]
            return Enqueue("exists", there.queue, job_id, f"already {there.state} there", state=there.state)
        router = store_router(client)
        enqueuer = Enqueuer(store, router)
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
        return asyncio.run(with_client(store, run))  # type: ignore[no-any-return]
    except JobIdError as error:
        raise ConfigError([Problem("job", str(error), kind, "give the job data a trigger.deliveryId")]) from error
    except (RedisError, OSError, TimeoutError) as error:
        raise PiDispatchError(f"the job was not enqueued: Valkey said {describe(error)}") from error


def enqueue_local(store: StoreAddress, host: str, data: dict[str, Any]) -> Enqueue:
    """Add one local job to its host's queue, under the reference's id for it, unless that id is queued already."""
    from datetime import UTC, datetime

    from pi_dispatch.core.jobs import local_job_id
    from pi_dispatch.core.keys import host_queue_name
    from pi_dispatch.fleet.enqueue import Enqueuer, store_router
    from pi_dispatch.fleet.locate import locate

    queue = host_queue_name(host)
    job_id = local_job_id(data, datetime.now(UTC).isoformat())

    async def run(client: Any) -> Enqueue:
        if found := await locate(client, job_id, [queue]):
            return Enqueue("exists", queue, job_id, f"already {found[0].state} there", state=found[0].state)
        enqueuer = Enqueuer(store, store_router(client))
        try:
            kept = await enqueuer.enqueue_local_job(queue, data, job_id)
        finally:
            await enqueuer.close()
        return Enqueue("added", queue, kept, f"a local job runs on the host whose folder it is ({host})")

    try:
        return asyncio.run(with_client(store, run))  # type: ignore[no-any-return]
    except (RedisError, OSError, TimeoutError) as error:
        raise PiDispatchError(f"the job was not enqueued: Valkey said {describe(error)}") from error


def merged_runs(logs_dir: Path, store: StoreAddress, limit: int, host: str | None) -> tuple[list[Any], str, int]:
    """This host's record files merged with the fleet mirror, how far to trust the mirror, and how many records
    were skipped as unreadable."""
    mirrored = read_mirror(store, limit)
    local, skipped = read_records_counted(logs_dir)
    runs = merge_runs(local, mirrored.runs, limit=limit if host is None else 10 * limit)
    if host is not None:
        runs = [run for run in runs if run.get("host") == host][:limit]
    return runs, mirrored.degraded, skipped + mirrored.skipped


def run_store(url: str | None, use: Callable[[Any], Any]) -> Any:
    """One command's store work (the store from --valkey-url and the environment), unreachable said in one line."""
    return on_store(store_address(url), use)


def on_store(store: StoreAddress, use: Callable[[Any], Any]) -> Any:
    """One command's store work, with a store that cannot be reached said in one line (exit 1)."""
    try:
        return asyncio.run(with_client(store, use))
    except (RedisError, OSError, TimeoutError) as error:
        raise PiDispatchError(f"Valkey could not be read: {describe(error)}") from error


def job_attempts(logs_dir: Path, store: StoreAddress, job_id: str) -> list[Any]:
    """Every attempt of one job: the fleet's list in the store, else this host's own."""
    from pi_dispatch.core.names import record_stem
    from pi_dispatch.fleet.jobhistory import read_attempts
    from pi_dispatch.worker.after.history import read_attempt_records

    stored = on_store(store, lambda client: read_attempts(client, record_stem(job_id)))
    return list(stored) or read_attempt_records(logs_dir, job_id)
