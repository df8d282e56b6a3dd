"""What every process's Prometheus registry starts with: `pi_dispatch_build_info` (this release and the reference
version it speaks with), and no `*_created` series (prometheus-client's creation times for each counter and
histogram, which Prometheus does not use and which doubled the series a scrape returns)."""

from __future__ import annotations

from typing import Any


def new_registry(component: str) -> Any:
    """A registry of the process's own, holding `pi_dispatch_build_info{version,reference_version,component} 1`."""
    from prometheus_client import CollectorRegistry, Info, disable_created_metrics

    from pi_dispatch import REFERENCE_VERSION, __version__

    disable_created_metrics()  # type: ignore[no-untyped-call]
    registry = CollectorRegistry(auto_describe=True)
    build = Info(
        "pi_dispatch_build", "This release, and the reference version it is compatible with.", registry=registry
    )
    build.info({"version": __version__, "reference_version": REFERENCE_VERSION, "component": component})
    return registry
