"""Egress costs, each against the same run's direct figure: a job container's start on the egress network against
one on a plain bridge, and HTTPS through the egress proxy (Debian's squid with the rendered rules) against the same
server reached directly.

- start: `docker run --rm` of the example image (busybox `true`) on a plain bridge, then on the egress network (an
  internal bridge, inter-container traffic off, its rules, the resolver that is not there mounted), interleaved,
  ROUNDS each;
- a new TLS connection and one request on it: REQUESTS of them straight to the server, and as many through a
  tunnel of the proxy, interleaved;
- a kept-alive request: REQUESTS on one connection, straight and through the proxy.
The server is a Python HTTPS server on the host's address of a network of documentation addresses
(203.0.113.128/26), named `bench.example` in the proxy's own hosts file; the client runs on the host, so what is
measured is the proxy's part alone. Goals (issue 40): start +150 ms at most; +2 ms at most per new TLS connection
and +0.3 ms per kept-alive request, medians. Needs root (the firewall rules), Docker, squid and openssl.

    python bench/egress.py [--rounds 15] [--requests 300]
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import http.server
import secrets
import socket
import ssl
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
from docker.types import IPAMConfig, IPAMPool

from pi_dispatch.core.egress import parse_allowlist
from pi_dispatch.demo.jobimage import EXAMPLE_IMAGE, build_example_image
from pi_dispatch.infra.squid import ProxyPlace, squid_config
from pi_dispatch.worker.gates.jobnetwork import (
    NO_RESOLVER,
    apply_rules,
    drop_rules,
    egress_rules_for,
    ensure_network,
    gateway_of,
)
from pi_dispatch.worker.host.egressproxy import answers, squid_binary

SUBNET = "203.0.113.128/26"  # documentation addresses only
NAME = "bench.example"
PORT = 8443
BODY = b"x" * 512


class Answer(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    # the head and the body in one write, sent at once: else Nagle holds the body for the peer's delayed ACK, and
    # every figure is 40 ms of the kernel's, not the proxy's
    wbufsize = 1 << 16
    disable_nagle_algorithm = True

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, *_: object) -> None:
        pass


@contextlib.contextmanager
def tls_server(address: str, folder: Path) -> Iterator[ssl.SSLContext]:
    """The HTTPS server on address:PORT with a fresh self-signed certificate for NAME; a client context trusting it."""
    key, cert = folder / "key.pem", folder / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", f"/CN={NAME}", "-addext",
         f"subjectAltName=DNS:{NAME}"],
        check=True, capture_output=True,
    )  # fmt: skip
    served = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    served.load_cert_chain(cert, key)
    server = http.server.ThreadingHTTPServer((address, PORT), Answer)
    server.socket = served.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = ssl.create_default_context(cafile=str(cert))
        client.check_hostname = False  # the straight one names an address; both still check the certificate
        yield client
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def squid(address: str, folder: Path, target: str) -> Iterator[tuple[str, int]]:
    """squid with the rendered rules for NAME:PORT, resolving NAME to `target`; where it listens."""
    folder.chmod(0o777)
    (folder / "hosts").write_text(f"{target} {NAME}\n")
    with socket.socket() as probe:
        probe.bind((address, 0))
        port = int(probe.getsockname()[1])
    place = ProxyPlace(address, folder, port, hosts_file=folder / "hosts", user="proxy")
    (folder / "squid.conf").write_text(squid_config(parse_allowlist(f"{NAME}:{PORT}\n", "bench"), place))
    process = subprocess.Popen([squid_binary(), "-N", "-f", str(folder / "squid.conf")], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not answers(address, port):
            if time.monotonic() > deadline or process.poll() is not None:
                raise SystemExit("squid did not start")
            time.sleep(0.05)
        yield address, port
    finally:
        process.terminate()
        process.wait(30)


def connection(context: ssl.SSLContext, server: str, proxy: tuple[str, int] | None) -> http.client.HTTPSConnection:
    """A connection to the server, straight or through a tunnel of the proxy (not yet opened)."""
    if proxy is None:
        return http.client.HTTPSConnection(server, PORT, context=context, timeout=30)
    tunnelled = http.client.HTTPSConnection(proxy[0], proxy[1], context=context, timeout=30)
    tunnelled.set_tunnel(NAME, PORT)
    return tunnelled


def one_request(made: http.client.HTTPSConnection) -> None:
    made.request("GET", "/", headers={"Host": NAME})
    answer = made.getresponse()
    assert answer.status == 200 and answer.read() == BODY


def timed(action: Callable[[], None]) -> float:
    started = time.perf_counter()
    action()
    return (time.perf_counter() - started) * 1000


def new_connections(context: ssl.SSLContext, server: str, proxy: tuple[str, int], count: int) -> dict[str, list[float]]:
    """A new TLS connection and one request, straight and tunnelled, interleaved: milliseconds each."""
    found: dict[str, list[float]] = {"direct": [], "proxy": []}
    for _ in range(count):
        for label, via in (("direct", None), ("proxy", proxy)):
            made = connection(context, server, via)
            found[label].append(timed(lambda made=made: one_request(made)))  # type: ignore[misc]
            made.close()
    return found


def kept_alive(context: ssl.SSLContext, server: str, proxy: tuple[str, int], count: int) -> dict[str, list[float]]:
    """Requests on one open connection each way, interleaved: milliseconds each (the connection's first left out)."""
    open_ones = {"direct": connection(context, server, None), "proxy": connection(context, server, proxy)}
    found: dict[str, list[float]] = {"direct": [], "proxy": []}
    for made in open_ones.values():
        one_request(made)
    for _ in range(count):
        for label, made in open_ones.items():
            found[label].append(timed(lambda made=made: one_request(made)))  # type: ignore[misc]
    for made in open_ones.values():
        made.close()
    return found


def starts(client: Any, plain: str, egress: str, resolv: Path, rounds: int) -> dict[str, list[float]]:
    """`docker run --rm` of the example image running `true`, on each network, interleaved: milliseconds each."""
    found: dict[str, list[float]] = {"plain": [], "egress": []}
    mounts = {str(resolv): {"bind": "/etc/resolv.conf", "mode": "ro"}}
    for _ in range(rounds):
        for label, network, volumes in (("plain", plain, None), ("egress", egress, mounts)):

            def run(network: str = network, volumes: Any = volumes) -> None:
                client.containers.run(
                    EXAMPLE_IMAGE, ["true"], entrypoint=["/bin/busybox"], network=network, volumes=volumes, remove=True
                )

            found[label].append(timed(run))
    return found


def said(samples: list[float]) -> str:
    ordered = sorted(samples)
    low, high = ordered[len(ordered) // 10], ordered[(len(ordered) * 9) // 10]
    return f"median {statistics.median(ordered):7.2f} ms (p10 {low:.2f} - p90 {high:.2f}, n={len(ordered)})"


def report(title: str, found: dict[str, list[float]], base: str, other: str, goal_ms: float) -> None:
    difference = statistics.median(found[other]) - statistics.median(found[base])
    print(f"{title}")
    print(f"  {base:<7} {said(found[base])}")
    print(f"  {other:<7} {said(found[other])}")
    print(f"  {other} - {base}: {difference:+.2f} ms (goal: +{goal_ms:g} ms at most)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15, help="container starts on each network")
    parser.add_argument("--requests", type=int, default=300, help="requests of each kind, each way")
    options = parser.parse_args()
    client = docker.from_env()
    build_example_image(client)
    suffix = secrets.token_hex(3)
    names = {"internet": f"pi-bench-internet-{suffix}", "plain": f"pi-bench-plain-{suffix}"}
    egress, bridge = f"pi-bench-egress-{suffix}", f"pibe{suffix}"
    networks = [
        client.networks.create(names["internet"], ipam=IPAMConfig(pool_configs=[IPAMPool(subnet=SUBNET)])),
        client.networks.create(names["plain"]),
    ]
    ensure_network(client, egress, bridge, internal=True)
    networks.append(client.networks.get(egress))
    rules: list[Any] = []
    try:
        with tempfile.TemporaryDirectory(prefix="pi-bench-egress-") as made:
            folder = Path(made)
            resolv = folder / "resolv.conf"
            resolv.write_text(NO_RESOLVER)
            server = gateway_of(client, names["internet"])
            with squid(gateway_of(client, egress), folder, server) as proxy:
                rules = egress_rules_for(bridge, proxy[0], proxy[1])
                apply_rules(rules)
                report("container start", starts(client, names["plain"], egress, resolv, options.rounds),
                       "plain", "egress", 150)  # fmt: skip
                with tls_server(server, folder) as context:
                    report("new TLS connection and one request",
                           new_connections(context, server, proxy, options.requests), "direct", "proxy", 2)  # fmt: skip
                    report("kept-alive request", kept_alive(context, server, proxy, options.requests),
                           "direct", "proxy", 0.3)  # fmt: skip
    finally:
        drop_rules(rules)
        for network in networks:
            with contextlib.suppress(docker.errors.APIError):
                network.remove()
        client.close()


if __name__ == "__main__":
    main()
