"""The worker process: its settings, its event log, its signals and its run, without the rest of the command line.

`pi-dispatch worker` runs for months on every host, so what it loads is paid fleet-wide: the command line starts
it here without importing the other commands, their tables or the CLI framework (`cli/__init__.py`), and only
`pi-dispatch worker --help` (or a mistyped option) goes through the full command line. Its settings are checked in a
child process (`config/handover.py`), so the libraries that check them are never loaded into the worker itself.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final, cast

if TYPE_CHECKING:
    from pi_dispatch.config.worker_settings import WorkerSettings

ENV_FILE_OPTION = "--env-file"
# What the worker reads of its settings besides their fields.
SETTINGS_PROPERTIES: Final = ("worker_name_declared",)


def plain_invocation(arguments: Sequence[str]) -> tuple[Path | None] | None:
    """`worker` or `worker --env-file FILE` (its env file, or None), the two ways a unit starts it; None for
    anything else, which the full command line parses (and explains)."""
    match list(arguments):
        case ["worker"]:
            return (None,)
        case ["worker", str(option), str(path)] if option == ENV_FILE_OPTION and path and not path.startswith("-"):
            return (Path(path),)
        case ["worker", str(option)] if option.startswith(f"{ENV_FILE_OPTION}=") and option.partition("=")[2]:
            return (Path(option.partition("=")[2]),)
    return None


def checked_settings(env_file: Path | None) -> WorkerSettings:
    """The worker's settings, checked in a child process (a config error raises here, naming every problem)."""
    from pi_dispatch.config.handover import checked_in_child

    def load() -> WorkerSettings:
        from pi_dispatch.config.worker_settings import load_settings

        return load_settings(env_file)

    return cast("WorkerSettings", checked_in_child(load, SETTINGS_PROPERTIES))


def run(env_file: Path | None) -> int:
    """Check the settings (a config error raises here, before anything connects) and run the worker until SIGTERM;
    returns its exit status."""
    from pi_dispatch.infra.events import json_lines
    from pi_dispatch.worker.lifecycle import serve

    settings = checked_settings(env_file)
    log = json_lines(settings.worker_name)

    async def until_stopped() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signal_number in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signal_number, stop.set)
        return await serve(settings, log, stop)

    return asyncio.run(until_stopped())
