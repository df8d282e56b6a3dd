"""The receiver process: its configuration, its event logs, its signals and its serving, without the rest of the
command line.

As the worker's (`worker/entry.py`): `pi-dispatch receiver [--env-file F]`, the way its unit starts it, skips the
CLI framework (`cli/__init__.py`), and its configuration is checked in a child process (`config/handover.py`), so the
libraries that check it are never loaded into the receiver that serves.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pi_dispatch.receiver.endpoints import ReceiverConfig


def checked_config(env_file: Path | None) -> ReceiverConfig:
    """The receiver's configuration, checked in a child process (a config error raises here, naming every
    problem)."""
    from pi_dispatch.config.handover import checked_in_child

    def load() -> ReceiverConfig:
        from pi_dispatch.receiver.endpoints import handed_over, load_receiver_config

        return handed_over(load_receiver_config(env_file))

    return checked_in_child(load)


def run(env_file: Path | None) -> int:
    """Check the configuration (a refusal is logged, then raised) and serve until SIGTERM; returns the exit
    status."""
    import asyncio
    import signal

    from pi_dispatch.infra.extras import require
    from pi_dispatch.infra.signals import STOP_SIGNALS

    for module in ("aiohttp", "jwt", "watchdog"):
        require("receiver", module)
    from pi_dispatch.infra.events import json_lines
    from pi_dispatch.receiver.boot import Stop, serve

    log = error_log = json_lines(None, sys.stdout, sys.stderr)  # warnings and errors on stderr, by their level
    try:
        config = checked_config(env_file)
    except Exception as error:  # broad: whatever stops the start is said on stderr as one line, then raised again
        error_log("receiver_start_failed", {"reason": str(error).replace("\n", "; ")})
        raise

    async def until_stopped() -> int:
        stop = Stop()
        loop = asyncio.get_running_loop()
        for signal_number in STOP_SIGNALS:
            loop.add_signal_handler(signal_number, stop.set, signal.Signals(signal_number).name)
        return await serve(config, log, stop, error_log)

    return asyncio.run(until_stopped())
