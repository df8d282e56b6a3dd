"""Whether the worker can go on: a consumer stuck, Docker gone with no job to wait for, or the store gone too long.

Each ends the worker with exit 1 and a one-line reason (`ProcessFault`), so systemd starts it again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from pi_dispatch.fleet.liveness import stuck_consumer
from pi_dispatch.infra.events import EventLog
from pi_dispatch.infra.supervise import ProcessFault

if TYPE_CHECKING:
    from pi_dispatch.fleet.registry import HostRegistry
    from pi_dispatch.worker.run.containers import ContainerRuntime

HEALTH_INTERVAL_S: Final = 5.0
# The store or Docker may be away this many lock durations (never less than the floor) before the worker gives
# up and exits 1 for systemd to start it again; by then every job it held has been fenced and put back.
FAULT_BUDGET_LOCKS: Final = 2
FAULT_BUDGET_FLOOR_S: Final = 10.0


def fault_budget_s(lock_duration_ms: int) -> float:
    return max(FAULT_BUDGET_FLOOR_S, FAULT_BUDGET_LOCKS * lock_duration_ms / 1000)


@dataclass(frozen=True)
class FaultWatch:
    """What the watch looks at: the host's row, Docker, the BullMQ consumers and whether a job runs."""

    registry: HostRegistry
    runtime: ContainerRuntime
    consumers: Callable[[], Sequence[Any]]
    busy: Callable[[], bool]


async def watch_faults(
    watch: FaultWatch, budget_s: float, stuck_after_s: float, stuck: Callable[[], None], log: EventLog
) -> None:
    """Raises ProcessFault with why the worker cannot go on; `stuck` is told first when a consumer is stuck."""
    interval = min(HEALTH_INTERVAL_S, budget_s / 4)
    docker_lost: float | None = None
    while True:
        await asyncio.sleep(interval)
        now = time.monotonic()
        if (found := stuck_consumer(watch.consumers(), now, stuck_after_s)) is not None:
            stuck()
            await watch.registry.publish()
            log("consumer_stuck", {"queue": found.queue, "seconds": round(found.seconds)})
            raise ProcessFault(found.reason)
        docker_lost = None if await watch.runtime.ping() else (docker_lost or now)
        if docker_lost is not None and now - docker_lost >= budget_s and not watch.busy():
            raise ProcessFault(f"the Docker daemon has been unreachable for {now - docker_lost:.0f} s")
        away = watch.registry.unreachable_for()
        if away >= budget_s:
            raise ProcessFault(f"Valkey has been unreachable for {away:.0f} s")
