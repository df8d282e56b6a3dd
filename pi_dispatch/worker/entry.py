"""The worker process: its settings, its event log, its signals and its run, without the rest of the command line.

`pi-dispatch worker` runs for months on every host, so what it loads is paid fleet-wide: the command line starts
it here without importing the other commands, their tables or the CLI framework (`cli/__init__.py`), and only
`pi-dispatch worker --help` (or a mistyped option) goes through the full command line. Its settings are checked in a
child process (`config/handover.py`), so the libraries that check them are never loaded into the worker itself.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Final, cast

from pi_dispatch.infra.signals import STOP_SIGNALS

if TYPE_CHECKING:
    from pi_dispatch.config.worker_settings import WorkerSettings
    from pi_dispatch.infra.events import EventLog

# What the worker reads of its settings besides their fields.
SETTINGS_PROPERTIES: Final = (
    "worker_name_declared",
    "jobs_network",
    "egress_network",
    "job_caps",
    "dollar_caps",
    "credentials",
)


def checked_settings(env_file: Path | None) -> WorkerSettings:
    """The worker's settings, checked in a child process (a config error raises here, naming every problem)."""
    from pi_dispatch.config.handover import checked_in_child

    def load() -> WorkerSettings:
        from pi_dispatch.config.worker_settings import load_settings

        return frozen_settings(load_settings(env_file))

    return checked_in_child(load)


def frozen_settings(settings: WorkerSettings) -> WorkerSettings:
    """The one form a worker runs with, in production and in tests: the checked model's values, frozen, under the
    model's names (the model, and the libraries that check it, stay out of the worker's process)."""
    from pi_dispatch.config.handover import settled

    return cast("WorkerSettings", settled(settings, SETTINGS_PROPERTIES))


async def refuse_an_evicting(settings: WorkerSettings) -> None:
    """Refuse to start (exit 2, naming the fix) against a store that may evict keys: its jobs would vanish."""
    from pi_dispatch.fleet.storeview import refuse_an_evicting_store
    from pi_dispatch.infra.store import store_of
    from pi_dispatch.infra.valkey import STORE_FAULTS

    client = store_of(settings).client()
    try:
        await refuse_an_evicting_store(client)
    finally:
        with contextlib.suppress(*STORE_FAULTS):
            await client.aclose()


def run(env_file: Path | None) -> int:
    """Check the settings (a config error raises here, before anything connects) and run the worker until SIGTERM;
    returns its exit status."""
    from pi_dispatch.infra.events import json_lines

    settings = checked_settings(env_file)
    log = json_lines(settings.worker_name)

    async def until_stopped() -> int:
        await refuse_an_evicting(settings)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signal_number in STOP_SIGNALS:
            loop.add_signal_handler(signal_number, stop.set)
        return await serve(settings, log, stop)

    return asyncio.run(until_stopped())


def settings_summary(settings: WorkerSettings) -> dict[str, object]:
    """What the worker logs at boot: names and numbers, never a path or a secret."""
    return {
        "worker": settings.worker_name,
        "declared": settings.worker_name_declared,
        "secretProfiles": sorted(settings.secret_profiles),
        "waitProfiles": sorted(settings.wait_profiles),
        "concurrency": settings.concurrency,
        "image": settings.job_image,
    }


async def serve(settings: WorkerSettings, log: EventLog, stop: asyncio.Event) -> int:
    """Connect to Docker, run the worker until stop is set. Raises DockerUnavailable when Docker is not there."""
    from pi_dispatch.infra.store import store_of
    from pi_dispatch.worker.gates.limits import read_limit_files
    from pi_dispatch.worker.host.egressproxy import egress_plan
    from pi_dispatch.worker.lifecycle import Worker
    from pi_dispatch.worker.run.containers import ContainerRuntime

    plan = egress_plan(settings)  # the profiles' lists read once (a config error raises here, before Docker)
    limit_files = read_limit_files(settings)  # so are the scoped limits and the pause windows
    runtime = await asyncio.to_thread(
        ContainerRuntime.connect, settings.worker_name, settings.concurrency, log, store_of(settings).fleet_id()
    )
    log("worker_config", settings_summary(settings))
    return await Worker(settings, runtime, log, egress_plan=plan, limit_files=limit_files).run(stop)
