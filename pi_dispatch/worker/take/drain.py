"""Taking nothing more: the consumers paused while their jobs finish within the drain's grace, then closed."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from pi_dispatch.infra.events import EventLog


async def drain_consumers(
    consumers: Sequence[Any],
    grace_s: float,
    *,
    stop_grace_s: float,
    abort_all: Callable[[], None],
    running: Callable[[], int],
    log: EventLog,
) -> None:
    """Pause every consumer (its jobs' locks still renewed); past `grace_s`, `abort_all` stops what still runs (each
    container within `stop_grace_s`); then close each, forced when a last write still retries against a store that
    is gone."""
    # Pausing stops fetching and waits for the jobs in hand while their locks are still renewed;
    # BullMQ's close() stops renewing them at once, which would hand a long job to a second host.
    pausing = [asyncio.ensure_future(bull.pause()) for bull in consumers]
    _, pending = await asyncio.wait(pausing, timeout=grace_s) if pausing else ((), ())
    if pending:
        log("drain_grace_over", {"running": running()})
        abort_all()
        _, pending = await asyncio.wait(pending, timeout=stop_grace_s * 3)
    for task in pending:
        task.cancel()
    closing = [asyncio.ensure_future(bull.close()) for bull in consumers]
    if closing:
        _, pending = await asyncio.wait(closing, timeout=stop_grace_s)
        if pending:  # a job's last write still retrying against a store that is gone (BullMQ retries minutes):
            # force it, so no close is left to the loop's shutdown (BullMQ's close spins on a cancelled one)
            forcing = [asyncio.ensure_future(bull.close(force=True)) for bull in consumers]
            _, pending = await asyncio.wait([*pending, *forcing], timeout=stop_grace_s)
            log("consumers_forced_closed", {"left": len(pending)})
