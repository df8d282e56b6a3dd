"""systemd's notify protocol, for a unit with Type=notify and WatchdogSec: READY=1 once serving, WATCHDOG=1 from
the event loop (so a blocked loop is killed and restarted), STOPPING=1 on the way out. One datagram each to
$NOTIFY_SOCKET; outside systemd there is no socket and nothing is sent."""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Final

WATCHDOG_SHARE: Final = 3  # feed the watchdog three times per WatchdogSec


def notify(message: str) -> bool:
    """Send one state line to systemd; False when not under a notify unit, or the socket refuses it or is full.
    Never waits: it is sent from the event loop, which a reader that stopped reading would otherwise block for good
    (a datagram socket queues only a few unread ones)."""
    address = os.environ.get("NOTIFY_SOCKET", "")
    if not address:
        return False
    target = "\0" + address[1:] if address.startswith("@") else address  # an abstract socket
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
            sender.setblocking(False)
            sender.connect(target)
            sender.send(message.encode())
    except OSError:
        return False
    return True


def watchdog_interval_s() -> float | None:
    """How often to feed the watchdog, when systemd set one for this process."""
    usec, pid = os.environ.get("WATCHDOG_USEC", ""), os.environ.get("WATCHDOG_PID", "")
    if not (usec.isascii() and usec.isdigit()) or int(usec) <= 0 or (pid and pid != str(os.getpid())):
        return None
    return int(usec) / 1_000_000 / WATCHDOG_SHARE


async def feed_watchdog(interval_s: float) -> None:
    """WATCHDOG=1 from the event loop itself: a loop blocked past WatchdogSec is killed and restarted."""
    while True:
        notify("WATCHDOG=1")
        await asyncio.sleep(interval_s)
