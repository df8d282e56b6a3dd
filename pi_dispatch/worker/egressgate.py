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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import docker.errors
import requests.exceptions

from pi_dispatch.core.egress import PROXY_PORT, proxy_environment
from pi_dispatch.core.reasons import Reason
from pi_dispatch.worker.jobnetwork import NO_RESOLVER, network_gateway

ANSWER_S: Final = 1.0  # how long the proxy's port may take to accept before it counts as stopped
RESOLVER_FILE: Final = "no-resolver.conf"  # in the worker's own jobs folder, mounted as a job's /etc/resolv.conf
_DOCKER_FAULTS: Final = (docker.errors.DockerException, requests.exceptions.RequestException)


class EgressDown(Exception):
    """Why this host's jobs cannot go out through the proxy now, in words for the host's row (names, never paths)."""


@dataclass(frozen=True)
class EgressWay:
    """A job's way out, once the gate has found it: the proxy's address and the file its resolver is."""

    gateway: str
    resolver: Path
    port: int = PROXY_PORT

    def environment(self) -> dict[str, str]:
        return proxy_environment(self.gateway, self.port)


@dataclass
class EgressGate:
    """One host's egress check: `way()` before each job's spend, and in the host's health probe."""

    docker: Any  # the Docker SDK's client
    network: str
    resolver: Path
    port: int = PROXY_PORT

    async def way(self) -> EgressWay:
        """The way out for a job now; raises EgressDown saying what is missing."""
        gateway = await self._answering_gateway()
        if not self.resolver.is_file():
            await asyncio.to_thread(_write_resolver, self.resolver)
        return EgressWay(gateway, self.resolver, self.port)

    async def fault(self) -> str | None:
        """What keeps this host's jobs from going out, or None (it changes nothing)."""
        try:
            await self._answering_gateway()
        except EgressDown as down:
            return str(down)
        return None

    async def _answering_gateway(self) -> str:
        gateway = await asyncio.to_thread(self._gateway)
        # asked twice: one accept slower than ANSWER_S on a loaded host is no reason to mark the host unhealthy
        if not await _answers(gateway, self.port) and not await _answers(gateway, self.port):
            raise EgressDown(
                f"{Reason.EGRESS_PROXY_STOPPED}: nothing answers on the {self.network} gateway's port {self.port}; "
                "fix: start the egress proxy (systemctl start pi-dispatch-egress-proxy, or pi-dispatch egress-proxy)"
            )
        return gateway

    async def address(self, container_id: str) -> str | None:
        """A job's container's address on the egress network (what the proxy's refusal log names it by)."""
        try:
            attributes = await asyncio.to_thread(self.docker.api.inspect_container, container_id)
        except _DOCKER_FAULTS:
            return None  # its refusals stay nobody's; the job runs on
        networks = (attributes.get("NetworkSettings") or {}).get("Networks") or {}
        address = (networks.get(self.network) or {}).get("IPAddress")
        return address if isinstance(address, str) and address else None

    def _gateway(self) -> str:
        try:
            attributes = self.docker.networks.get(self.network).attrs
        except docker.errors.NotFound:
            raise EgressDown(
                f"{Reason.EGRESS_PROXY_MISSING}: no Docker network {self.network}; fix: run the egress proxy "
                "(pi-dispatch egress-proxy makes it), or set PI_EGRESS=0"
            ) from None
        except _DOCKER_FAULTS:
            raise EgressDown("the Docker daemon does not answer") from None
        gateway = network_gateway(attributes)
        if not attributes.get("Internal") or gateway is None:
            raise EgressDown(
                f"{Reason.EGRESS_PROXY_MISSING}: the Docker network {self.network} is not an egress network (it "
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


def _write_resolver(path: Path) -> None:
    path.parent.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # as `jobdirs.write_job_dir` makes them
    path.parent.mkdir(mode=0o711, exist_ok=True)
    path.write_text(NO_RESOLVER, encoding="utf-8")
    path.chmod(0o644)  # the job's user reads it, whoever that is
