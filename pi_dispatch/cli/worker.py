"""`pi-dispatch worker`: this host's worker, until SIGTERM."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def worker(
    env_file: Annotated[
        Path | None,
        typer.Option("--env-file", help="Read this env file alone instead of the environment (as systemd would)."),
    ] = None,
) -> None:
    """Run this host's worker: drain pi-jobs and pi-jobs@<name> until SIGTERM, one container per job."""
    import asyncio
    import signal

    from pi_dispatch.config.worker_settings import load_settings
    from pi_dispatch.infra.events import json_lines
    from pi_dispatch.worker.lifecycle import serve

    settings = load_settings(env_file)  # a config error exits 2 here, before anything connects
    log = json_lines(settings.worker_name)

    async def run() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signal_number in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signal_number, stop.set)
        return await serve(settings, log, stop)

    raise typer.Exit(asyncio.run(run()))
