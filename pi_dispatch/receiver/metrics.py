"""The receiver's Prometheus metrics: deliveries by forge and answer, and the drops by reason."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pi_dispatch.infra.events import EventLog


@dataclass
class ReceiverMetrics:
    """The receiver's metrics, served beside /livez and /readyz on PI_RECEIVER_HEALTH_ADDR."""

    registry: Any = None

    def __post_init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter

        self.registry = CollectorRegistry(auto_describe=True)
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
