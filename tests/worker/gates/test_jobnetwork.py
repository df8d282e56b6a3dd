"""The job network on this machine's Docker and firewall (root): a job on it reaches a public address but not the
host (whatever its addresses), a container on a private range, or the metadata address; the same job on Docker's
default bridge reaches them all, which is why it exists."""

from __future__ import annotations

import contextlib
import secrets
import socket
import socketserver
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from pi_dispatch.worker.gates.jobnetwork import IPTABLES, denied_ranges, missing_rules, rules_for
from tests.support.helpers import run_cli

pytestmark = [pytest.mark.docker, pytest.mark.slow]
GREETING = "hello-from-the-target"
SERVE = f"while true; do echo {GREETING} | nc -l -p 8080; done"
PUBLIC_SUBNET = "198.51.100.0/24"  # in no denied range: the internet, as far as the rules can tell
EXTRA = "203.0.113.9"  # a store on a public address


class Greeter(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.request.sendall(f"{GREETING}\n".encode())


@contextlib.contextmanager
def host_listener() -> Iterator[int]:
    server = socketserver.ThreadingTCPServer(("0.0.0.0", 0), Greeter)  # every host address, on purpose
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def host_address() -> str:
    """This host's own address on its default route (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.200", 9))
        return str(probe.getsockname()[0])


def reach(client: Any, image: str, network: str, targets: dict[str, tuple[str, int]]) -> dict[str, str]:
    """What one container on `network` reads from each target within 3 s (the greeting, or nc's error), by name."""
    tries = [f'echo "{what}=$(nc -w 3 {address} {port} </dev/null 2>&1)"' for what, (address, port) in targets.items()]
    entry = ["/bin/busybox", "sh", "-c"]
    output = client.containers.run(image, ["; ".join(tries)], entrypoint=entry, network=network, remove=True)
    lines = output.decode(errors="replace").splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def serving(client: Any, image: str, network: str) -> Any:
    return client.containers.run(image, [SERVE], entrypoint=["/bin/busybox", "sh", "-c"], network=network, detach=True)


def iptables(*arguments: str) -> None:
    subprocess.run([*IPTABLES, *arguments], check=False, capture_output=True)


def _ipam(subnet: str) -> Any:
    from docker.types import IPAMConfig, IPAMPool

    return IPAMConfig(pool_configs=[IPAMPool(subnet=subnet)])


def test_a_job_on_the_network_reaches_the_internet_only(docker_client: Any, job_image: str) -> None:
    suffix = secrets.token_hex(3)
    name, bridge, public = f"pi-jobs-t{suffix}", f"pijt{suffix}", f"pi-public-t{suffix}"
    rules = rules_for(bridge, denied_ranges([EXTRA]))
    containers: list[Any] = []
    networks: list[Any] = []
    stand_in = [  # past Docker's isolation of two bridges, for this test's stand-in internet only
        ("-i", bridge, "-d", PUBLIC_SUBNET, "-j", "ACCEPT"),
        ("-o", bridge, "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"),
    ]
    command = ["job-network", "--name", name, "--bridge", bridge, "--deny", EXTRA]
    try:
        first = run_cli(*command)
        assert first.returncode == 0, first.stdout + first.stderr
        assert f"network {name} ({bridge}) made; {len(rules)} of {len(rules)} rules added" in first.stdout
        assert f"in place; 0 of {len(rules)} rules added" in run_cli(*command).stdout  # idempotent
        assert run_cli(*command, "--check").returncode == 0 and missing_rules(rules) == []
        networks.append(docker_client.networks.create(public, driver="bridge", ipam=_ipam(PUBLIC_SUBNET)))
        iptables("-I", "DOCKER-USER", str(len(rules)), *stand_in[0])  # after the job network's rejections
        iptables("-I", "DOCKER-USER", "1", *stand_in[1])
        internet = serving(docker_client, job_image, public)
        neighbour = serving(docker_client, job_image, "bridge")  # a LAN neighbour: a private address
        containers += [internet, neighbour]
        internet.reload()
        neighbour.reload()
        with host_listener() as port:
            targets = {
                "host": (host_address(), port),
                "private": (neighbour.attrs["NetworkSettings"]["IPAddress"], 8080),
            }
            control = reach(docker_client, job_image, "bridge", targets)
            public_address = internet.attrs["NetworkSettings"]["Networks"][public]["IPAddress"]
            targets |= {"public": (public_address, 8080), "metadata": ("169.254.169.254", 80)}
            seen = reach(docker_client, job_image, name, targets)
    finally:
        for rule in rules:
            iptables("-D", rule.chain, *rule.spec)
        for spec in stand_in:
            iptables("-D", "DOCKER-USER", *spec)
        for container in containers:
            with contextlib.suppress(Exception):
                container.remove(force=True)
        for network in [*networks, *docker_client.networks.list(names=[name])]:
            with contextlib.suppress(Exception):
                network.remove()
    assert GREETING in control["host"] and GREETING in control["private"], control  # Docker's default reaches both
    assert GREETING in seen["public"], seen
    for what in ("host", "private", "metadata"):  # each refused at once by a rule, not left to time out
        assert GREETING not in seen[what], seen
        assert "No route to host" in seen[what] or "unreachable" in seen[what].lower(), seen
    assert run_cli(*command, "--check").returncode == 1  # the rules gone again: said, and nothing changed
