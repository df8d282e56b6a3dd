"""The egress proxy's rules, run by Debian's real squid against a stand-in internet on documentation addresses
(198.51.100.0/24, a Docker network of this test's own), names pinned in a hosts file of its own."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pi_dispatch.core.egress import parse_allowlist
from pi_dispatch.infra.squid import ProxyPlace, squid_config

pytestmark = [pytest.mark.docker, pytest.mark.squid]
CEILING_S = 30.0  # only a hang reaches it
SUBNET, ALLOWED_IP, DENIED_IP = "198.51.100.0/24", "198.51.100.10", "198.51.100.11"
HOSTS = f"""
{ALLOWED_IP} allowed.example a.wide.example wide.example
{DENIED_IP} denied.example
10.200.0.1 inside.example
127.0.0.1 loop.example
"""
ALLOWLIST = """
# the stand-in's own names
allowed.example
.wide.example
allowed.example:8443
inside.example
loop.example
"""
SERVE = "mkdir /w; echo stand-in >/w/index.html; httpd -p 80 -h /w; httpd -p 8443 -h /w; httpd -f -p 443 -h /w"


@pytest.fixture(scope="module")
def internet(docker_client: Any, job_image: str) -> Iterator[None]:
    """Two servers (80, 443 and 8443 each) on a network of documentation addresses, reachable from the host."""
    from docker.types import IPAMConfig, IPAMPool

    network = docker_client.networks.create(
        f"pi-test-internet-{uuid.uuid4().hex[:8]}", ipam=IPAMConfig(pool_configs=[IPAMPool(subnet=SUBNET)])
    )
    servers = []
    try:
        for address in (ALLOWED_IP, DENIED_IP):
            server = docker_client.containers.create(
                job_image, entrypoint=["/bin/busybox", "sh", "-c", SERVE], network=network.name, detach=True
            )
            network.disconnect(server)
            network.connect(server, ipv4_address=address)
            server.start()
            servers.append(server)
        for address in (ALLOWED_IP, DENIED_IP):
            _until_listening(address, 443)
        yield
    finally:
        for server in servers:
            server.remove(force=True)
        network.remove()


@pytest.fixture(scope="module")
def proxy(internet: None, squid_binary: str) -> Iterator[int]:
    """squid in the foreground with the rendered rules; its port."""
    with tempfile.TemporaryDirectory(prefix="pi-test-squid-") as made:  # not under pytest's 0700 folders
        state = Path(made)
        state.chmod(0o777)  # squid drops to Debian's proxy user once it has its port
        yield from _running_squid(squid_binary, state)


def _running_squid(squid_binary: str, state: Path) -> Iterator[int]:
    (state / "hosts").write_text(HOSTS)
    port = _free_port()
    place = ProxyPlace("127.0.0.1", state, port, hosts_file=state / "hosts", user="proxy")
    (state / "squid.conf").write_text(squid_config(parse_allowlist(ALLOWLIST, "test"), place))
    squid = subprocess.Popen([squid_binary, "-N", "-f", str(state / "squid.conf")], stderr=subprocess.PIPE)
    try:
        _until_listening("127.0.0.1", port, squid)
        yield port
    finally:
        squid.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            squid.wait(CEILING_S)
        squid.kill()
        if squid.stderr is not None:
            squid.stderr.close()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _until_listening(host: str, port: int, process: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + CEILING_S
    while True:
        if process is not None and process.poll() is not None:
            said = process.stderr.read() if process.stderr else b""
            raise AssertionError(f"squid exited {process.returncode}: {said!r}")
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
            return
        assert time.monotonic() < deadline, f"nothing listens on {host}:{port}"
        time.sleep(0.05)


def _exchange(port: int, request: str, then: str | None = None) -> tuple[int, bytes]:
    """The proxy's status for `request`, and what `then` (sent through an opened tunnel) is answered."""
    with socket.create_connection(("127.0.0.1", port), timeout=CEILING_S) as connection:
        connection.sendall(request.encode())
        if then is None:  # a plain request: its whole answer, the proxy closes after it
            answer = _read_all(connection)
            return int(answer.split(b" ", 2)[1]), answer
        head = _read_head(connection)
        status = int(head.split(b" ", 2)[1])
        if status != 200:
            return status, head
        connection.sendall(then.encode())
        return status, _read_all(connection)


def _read_head(connection: socket.socket) -> bytes:
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = connection.recv(4096)
        if not chunk:
            break
        received += chunk
    return received


def _read_all(connection: socket.socket) -> bytes:
    received = b""
    while chunk := connection.recv(4096):
        received += chunk
    return received


def connect(port: int, target: str) -> tuple[int, bytes]:
    return _exchange(
        port, f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n", "GET / HTTP/1.0\r\nHost: stand-in\r\n\r\n"
    )


def plain(port: int, url: str) -> tuple[int, bytes]:
    host = url.split("/")[2]
    return _exchange(port, f"GET {url} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")


@pytest.mark.parametrize(
    "target", ["allowed.example:443", "wide.example:443", "a.wide.example:443", "allowed.example:8443"]
)
def test_a_listed_destination_is_tunnelled_to(proxy: int, target: str) -> None:
    status, answer = connect(proxy, target)
    assert status == 200 and b"stand-in" in answer


@pytest.mark.parametrize(
    ("target", "why"),
    [
        ("denied.example:443", "an unlisted name"),
        (f"{ALLOWED_IP}:443", "an IP literal, though a listed name resolves to it"),
        ("allowed.example:22", "a port its entry does not list"),
        ("a.wide.example:8443", "a port only another entry lists"),
        ("inside.example:443", "a listed name that resolves to RFC 1918"),
        ("loop.example:443", "a listed name that resolves to loopback"),
    ],
)
def test_anything_else_is_refused_with_403(proxy: int, target: str, why: str) -> None:
    assert connect(proxy, target)[0] == 403, why


def test_plain_http_reaches_only_a_listed_name_on_port_80(proxy: int) -> None:
    status, answer = plain(proxy, "http://allowed.example/")
    assert status == 200 and b"stand-in" in answer
    assert b"X-Cache" not in answer and socket.gethostname().encode() not in answer  # names no host
    assert plain(proxy, "http://denied.example/")[0] == 403
    assert plain(proxy, "http://allowed.example:8443/")[0] == 403
    assert plain(proxy, "https://allowed.example/")[0] == 403  # a plain forward to the TLS port
    assert plain(proxy, f"http://{ALLOWED_IP}/")[0] == 403
