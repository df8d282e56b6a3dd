"""The rollout's health gate for one host: back, as its inventory renders it, serving, and nothing lost. Pure.

After a batch of hosts is rolled out (the unit stopped, which drains, then started), each host must show:
its registry row, beating since the gate began; the capabilities and routes flag its inventory declares; the
package version the rollout installed; its job image, present on the host (a digest); a queue consumer that
polls and is not stuck. And each job that was in flight when it stopped is still known to a queue (finished,
or put back to wait), never gone. `verdict` says what is not so yet, worded for the operator who must fix it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from pi_dispatch.config.hostvars import InventoryHost
from pi_dispatch.config.worker_settings import WorkerSettings
from pi_dispatch.core.capabilities import is_stuck
from pi_dispatch.core.jscompat import finite, js_number
from pi_dispatch.fleet.hosts import FleetHost
from pi_dispatch.fleet.liveness import POLL_SILENCE_S

LOST: Final = "unknown"  # BullMQ's state of a job id no queue holds


@dataclass(frozen=True)
class Expected:
    """What a host must publish once it is rolled out, from its inventory (and the version being installed)."""

    host: str
    worker: str
    caps: str
    routes: str
    image: str
    version: str | None

    @classmethod
    def of(cls, host: InventoryHost, version: str | None) -> Expected:
        fleet = FleetHost.of_inventory(host)
        image = host.declared("job_image") or WorkerSettings.model_fields["job_image"].default
        return cls(host.name, fleet.worker_name, fleet.caps, fleet.routes, str(image), version or None)


def _field(row: Mapping[str, object], key: str) -> str:
    value = row.get(key)
    return "" if value is None else str(value)


def verdict(
    expected: Expected,
    row: Mapping[str, object] | None,
    job_states: Mapping[str, str],
    since_ms: int,
    now_ms: int,
) -> list[str]:
    """What keeps the host from passing: [] once it is healthy. job_states: each in-flight job's state now."""
    if row is None:
        return [
            f"no registry row for worker {expected.worker!r}: its worker is not running or cannot reach the store "
            "(systemctl status pi-dispatch-worker; journalctl -u pi-dispatch-worker)"
        ]
    problems = []
    beat = js_number(row.get("beatAt"))
    if not finite(beat) or beat < since_ms:
        problems.append("its row has not been beaten since the gate began")
    for key, want, what in (
        ("caps", expected.caps, "capabilities"),
        ("routes", expected.routes, "routes flag"),
        ("version", expected.version, "package version"),
        ("image", expected.image, "job image"),
    ):
        if want is not None and _field(row, key) != want:
            problems.append(f"publishes {what} {_field(row, key) or '(none)'!r}; the rollout renders {want!r}")
    if not _field(row, "imageDigest"):
        problems.append(f"its job image {expected.image!r} is not on the host: build or pull it there")
    polled = js_number(row.get("polledAt"))
    if is_stuck(row):
        problems.append("its queue consumer is stuck")
    elif not finite(polled) or polled <= 0 or (now_ms - polled) / 1000 > POLL_SILENCE_S:
        problems.append("its queue consumer has not polled the store recently")
    lost = sorted(job_id for job_id, state in job_states.items() if state == LOST)
    if lost:
        problems.append(f"{len(lost)} jobs in flight at its stop are in no queue: {', '.join(lost[:5])}")
    return problems
