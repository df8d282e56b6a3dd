"""`pi-dispatch worker`: this host's worker, until SIGTERM (its run is `worker/entry.py`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pi_dispatch.infra.units import ENV_FILE_OPTION


def worker(
    env_file: Annotated[
        Path | None,
        typer.Option(ENV_FILE_OPTION, help="Read this env file alone instead of the environment (as systemd would)."),
    ] = None,
) -> None:
    """Run this host's worker: drain pi-jobs and pi-jobs@<name> until SIGTERM, one container per job."""
    from pi_dispatch.worker.entry import run

    raise typer.Exit(run(env_file))
