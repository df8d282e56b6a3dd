"""The egress gate: with PI_EGRESS on, no job spends anything until this host's egress network is there, internal,
and its proxy answers on the network's gateway; the job's container then joins that network, is told of the proxy
(`core/egress.proxy_environment`) and gets a resolver that is not there (`NO_RESOLVER`), so its one way out is the
proxy and a name lookup carries nothing out.

A gate that fails is the host's fault, never the job's: the job goes back unspent and the host is marked unhealthy
(`hosthealth.py`), so routing and stealing leave it out and its queue moves to capable peers, until its beat finds
the proxy answering again. A proxy restarting under systemd thus holds the jobs, then they run; one that stays
down is what the host's row, `hosts` and `audit` show, with the reference's reason word first
(`egress-proxy-missing`, `egress-proxy-stopped`) and the fix.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import docker.errors
import requests.exceptions

from pi_dispatch.core.egress import PROXY_PORT, proxy_environment
from pi_dispatch.core.egressprofiles import OFFLINE_NETWORK
from pi_dispatch.core.reasons import Reason
from pi_dispatch.worker.gates.jobnetwork import NO_RESOLVER, network_gateway

_STAMP: Final = re.compile(
    r"(?P<whole>[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2})(?:\.(?P<fraction>[0-9]{1,9}))?Z"
)
ANSWER_S: Final = 1.0  # how long the proxy's port may take to accept before it counts as stopped
RESOLVER_FILE: Final = "no-resolver.conf"  # in the worker's own jobs folder, mounted as a job's /etc/resolv.conf
_DOCKER_FAULTS: Final = (docker.errors.DockerException, requests.exceptions.RequestException)


class EgressDown(Exception):
    """Why this host's jobs cannot go out through the proxy now, in words for the host's row (names, never paths)."""


@dataclass(frozen=True)
class EgressWay:
    """A job's way out, once the gate has found it: its network, the proxy's address there and its resolver file."""

    network: str
    gateway: str
    resolver: Path
    port: int = PROXY_PORT

    def environment(self) -> dict[str, str]:
        return proxy_environment(self.gateway, self.port)


@dataclass
class EgressGate:
    """One host's egress check: `way(network)` before each job's spend, and in the host's health probe (every
    network its jobs may join: its own, then one per profile list, `core/egressprofiles.py`)."""

    docker: Any  # the Docker SDK's client
    networks: tuple[str, ...]
    resolver: Path
    port: int = PROXY_PORT

    async def way(self, network: str) -> EgressWay:
        """The way out for a job on `network` now; raises EgressDown saying what is missing."""
        gateway = await self._answering_gateway(network)
        if not self.resolver.is_file():
            await asyncio.to_thread(_write_resolver, self.resolver)
        return EgressWay(network, gateway, self.resolver, self.port)

    async def way_or_fault(self, network: str | None) -> EgressWay | str | None:
        """A job's way out on its network; None for a job cut off (`none`, or no network); what is missing when
        the proxy is not there (the host's fault: the job goes back unspent)."""
        if network is None or network == OFFLINE_NETWORK:
            return None
        try:
            return await self.way(network)
        except EgressDown as down:
            return str(down)

    async def fault(self) -> str | None:
        """What keeps this host's jobs from going out on any of its networks, or None (it changes nothing)."""
        for network in self.networks:
            try:
                await self._answering_gateway(network)
            except EgressDown as down:
                return str(down)
        return None

    async def _answering_gateway(self, network: str) -> str:
        gateway = await asyncio.to_thread(self._gateway, network)
        # asked twice: one accept slower than ANSWER_S on a loaded host is no reason to mark the host unhealthy
        if not await _answers(gateway, self.port) and not await _answers(gateway, self.port):
            raise EgressDown(
                f"{Reason.EGRESS_PROXY_STOPPED}: nothing answers on the {network} gateway's port {self.port}; "
                "fix: start the egress proxy (systemctl start pi-dispatch-egress-proxy, or pi-dispatch egress-proxy)"
            )
        return gateway

    async def address(self, container_id: str) -> tuple[str, int | None] | None:
        """A job's container's address on its network (what the proxy's refusal log names it by), and when its
        process started (epoch ms; None when Docker does not say): it had the address from then, and an earlier
        holder had let it go before."""
        try:
            attributes = await asyncio.to_thread(self.docker.api.inspect_container, container_id)
        except _DOCKER_FAULTS:
            return None  # its refusals stay nobody's; the job runs on
        networks = (attributes.get("NetworkSettings") or {}).get("Networks") or {}
        for network in self.networks:  # a job's container is on one of them
            address = (networks.get(network) or {}).get("IPAddress")
            if isinstance(address, str) and address:
                return address, _epoch_ms((attributes.get("State") or {}).get("StartedAt"))
        return None

    def _gateway(self, network: str) -> str:
        try:
            attributes = self.docker.networks.get(network).attrs
        except docker.errors.NotFound:
            raise EgressDown(
                f"{Reason.EGRESS_PROXY_MISSING}: no Docker network {network}; fix: run the egress proxy "
                "(pi-dispatch egress-proxy makes it; restart it after an allowlist changes), or set PI_EGRESS=0"
            ) from None
        except _DOCKER_FAULTS:
            raise EgressDown("the Docker daemon does not answer") from None
        gateway = network_gateway(attributes)
        if not attributes.get("Internal") or gateway is None:
            raise EgressDown(
                f"{Reason.EGRESS_PROXY_MISSING}: the Docker network {network} is not an egress network (it "
                "is not internal), so a job on it would reach past the proxy; fix: leave PI_JOB_NETWORK empty for "
                "the egress proxy's, or set PI_EGRESS=0"
            )
        return gateway


async def _answers(address: str, port: int) -> bool:
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(address, port), ANSWER_S)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


def _epoch_ms(stamp: object) -> int | None:
    """Docker's RFC 3339 time (nanoseconds, `Z`) in epoch ms; None for anything else."""
    found = _STAMP.fullmatch(stamp) if isinstance(stamp, str) else None
    if found is None:
        return None
    try:
        whole = datetime.fromisoformat(found["whole"]).replace(tzinfo=UTC)
    except ValueError:  # shaped like a time, but not one (month 13)
        return None
    at_ms = int(whole.timestamp()) * 1000 + int((found["fraction"] or "0")[:3].ljust(3, "0"))
    return at_ms if at_ms > 0 else None  # Docker's zero time: not started


def _write_resolver(path: Path) -> None:
    path.parent.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # as `jobdirs.write_job_dir` makes them
    path.parent.mkdir(mode=0o711, exist_ok=True)
    path.write_text(NO_RESOLVER, encoding="utf-8")
    path.chmod(0o644)  # the job's user reads it, whoever that is
