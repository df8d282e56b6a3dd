"""The signals that stop a long-running command: SIGTERM (systemd's stop, `kill`) and SIGINT (Ctrl-C)."""

from __future__ import annotations

import asyncio
import signal
from typing import Final

STOP_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT)


async def until_stop_signal() -> None:
    """Return once SIGTERM or SIGINT arrives; the handlers are removed again on the way out."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signal_number in STOP_SIGNALS:
        loop.add_signal_handler(signal_number, stop.set)
    try:
        await stop.wait()
    finally:
        for signal_number in STOP_SIGNALS:
            loop.remove_signal_handler(signal_number)
