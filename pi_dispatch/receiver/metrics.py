"""The receiver's Prometheus metrics: deliveries by forge and answer, and the drops by reason."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from pi_dispatch.infra.events import EventLog
from pi_dispatch.infra.metrics import new_registry
from pi_dispatch.receiver.guard import CAP_ACTIONS, CAPS
from pi_dispatch.receiver.routes import DROP_REASONS
from pi_dispatch.receiver.spool import Spool

SPOOL_OUTCOMES: Final = ("spooled", "replayed", "refused", "set-aside")
# The statuses a delivery is answered with (receiver-contract.md), each a series from boot so a rate has a start.
ANSWERED: Final = (202, 204, 400, 401, 403, 404, 405, 408, 413, 415, 500, 503)


@dataclass
class ReceiverMetrics:
    """The receiver's metrics, served beside /livez and /readyz on PI_RECEIVER_HEALTH_ADDR."""

    forges: Sequence[str] = ()  # the forges served: their series exist from boot, at zero
    registry: Any = None

    def __post_init__(self) -> None:
        from prometheus_client import Counter

        self.registry = new_registry("receiver")
        self.deliveries = Counter(
            "pi_dispatch_deliveries",
            "Webhook deliveries by forge and the HTTP status they were answered with.",
            ["forge", "status"],
            registry=self.registry,
        )
        self.dropped = Counter(
            "pi_dispatch_deliveries_dropped",
            "Verified deliveries that started no job, by why (see the drop reasons).",
            ["reason"],
            registry=self.registry,
        )
        self.capped = Counter(
            "pi_dispatch_receiver_connections_capped",
            "Connections that met a cap, in all (total) or from one address (peer), by what was done: an idle or slow "
            "connection closed to make room (evicted), or the new one answered 503 (refused).",
            ["cap", "action"],
            registry=self.registry,
        )

        self.spool_outcomes = Counter(
            "pi_dispatch_receiver_spool",
            "Deliveries the store could not take: kept in the spool (spooled), later queued from it (replayed), not "
            "kept because the spool was full or its disk refused (refused, answered 503), or moved out of the "
            "replay because the store refused their data (set-aside).",
            ["outcome"],
            registry=self.registry,
        )
        for outcome in SPOOL_OUTCOMES:
            self.spool_outcomes.labels(outcome)
        for cap in CAPS:
            for action in CAP_ACTIONS:
                self.capped.labels(cap, action)
        for forge in self.forges:
            for status in ANSWERED:
                self.deliveries.labels(forge, str(status))
        for reason in DROP_REASONS:
            self.dropped.labels(reason)

    def watch_spool(self, spool: Spool) -> None:
        """The spool's depth and size, read at each scrape."""
        from prometheus_client import Gauge

        waiting = "Deliveries waiting in the spool for the store."
        entries = Gauge("pi_dispatch_receiver_spool_entries", waiting, registry=self.registry)
        entries.set_function(lambda: spool.depth)
        held = Gauge("pi_dispatch_receiver_spool_bytes", "Bytes the spool holds.", registry=self.registry)
        held.set_function(lambda: spool.bytes)

    def observe(self, log: EventLog) -> EventLog:
        def counted(event: str, fields: Mapping[str, object]) -> None:
            log(event, fields)
            if event == "dropped":
                self.dropped.labels(str(fields.get("reason", ""))).inc()

        return counted

    def answered(self, forge: str, status: int) -> None:
        self.deliveries.labels(forge, str(status)).inc()

    def exposition(self) -> tuple[bytes, str]:
        """The metrics in Prometheus' text format, and its content type."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST
