"""The host made ready before anything is taken, and kept tidy after: its triggers file read, a dead worker's
containers and job folders removed, the job image's id read, old logs reaped (at boot, then once a day)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Final

from pi_dispatch.infra.events import EventLog
from pi_dispatch.worker.after.history import reap_logs
from pi_dispatch.worker.prepare.jobdirs import clear_job_dirs

if TYPE_CHECKING:
    from pi_dispatch.config.worker_settings import WorkerSettings
    from pi_dispatch.triggers.file import Trigger
    from pi_dispatch.worker.run.containers import ContainerRuntime

SWEEP_INTERVAL_S: Final = 24 * 3600
TRIGGERS_LABEL: Final = "PI_TRIGGERS_FILE"  # how logs and errors name the file: a name, never its path


async def read_triggers(settings: WorkerSettings) -> tuple[bytes, list[Trigger] | None]:
    """The triggers file's bytes and triggers (None: cron disabled). A file that does not load is a config error:
    the worker exits 2 before it touches anything."""
    if settings.triggers_file is None:
        return b"", None
    from pi_dispatch.triggers.schedules import load_cron

    return await asyncio.to_thread(load_cron, settings.triggers_file, TRIGGERS_LABEL)


async def prepare_host(runtime: ContainerRuntime, settings: WorkerSettings, log: EventLog) -> tuple[int, str | None]:
    """Before anything is taken: a dead worker's containers and job folders removed, the job image's id read, old
    logs reaped. Returns how many containers went and the image's id."""
    reaped = await runtime.reap()
    await asyncio.to_thread(clear_job_dirs, settings.jobs_dir, settings.worker_name)
    digest = await runtime.image_id(settings.job_image)
    if digest is None:
        log("job_image_missing", {"image": settings.job_image})
    with contextlib.suppress(OSError):
        settings.logs_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    await asyncio.to_thread(reap_logs, settings.logs_dir, settings.log_retention_days, log=log)
    return reaped, digest


async def sweep_logs_forever(settings: WorkerSettings, log: EventLog) -> None:
    while True:
        await asyncio.sleep(SWEEP_INTERVAL_S)
        await asyncio.to_thread(reap_logs, settings.logs_dir, settings.log_retention_days, log=log)
