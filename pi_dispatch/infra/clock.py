"""The wall clock and the host's zone: the one place the shell reads time for the pure core."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path


def wall_ms() -> int:
    """Milliseconds since the epoch, as `Date.now()` gives them."""
    return time.time_ns() // 1_000_000


def host_zone(configured: str | None) -> str:
    """This host's IANA zone: TZ when set, else the name /etc/localtime links to, else ''."""
    if configured:
        return configured.removeprefix(":")
    with contextlib.suppress(OSError):
        target = str(Path("/etc/localtime").readlink())
        if "zoneinfo/" in target:
            return target.split("zoneinfo/", 1)[1]
    return ""
