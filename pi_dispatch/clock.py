"""The wall clock, in epoch milliseconds: the one place the shell reads time for the pure core."""

from __future__ import annotations

import time


def wall_ms() -> int:
    """Milliseconds since the epoch, as `Date.now()` gives them."""
    return time.time_ns() // 1_000_000
