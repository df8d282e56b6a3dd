"""A stand-in internet on documentation addresses (a block of 203.0.113.0/24 per test module, a Docker network of
its own, never any other address; the job network's test holds 198.51.100.0/24) and Debian's squid run with the
egress proxy's rendered rules, for the egress tests."""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pi_dispatch.core.egress import parse_allowlist
from pi_dispatch.infra.squid import Listener, ProxyPlace, squid_config
from pi_dispatch.worker.host.egressproxy import answers

CEILING_S = 30.0  # only a hang reaches it
# The names the proxy resolves (its own hosts file): two stand-ins, and listed names pointed inside.
HOSTS = """
{allowed} allowed.example a.wide.example wide.example
{denied} denied.example
10.200.0.1 inside.example
127.0.0.1 loop.example
:: unspecified6.example
::1 loop6.example
64:ff9b::a00:1 nat64.example
fe80::1 link6.example
fd00::1 ula6.example
2002:a00:1::1 sixtofour.example
100::1 discard6.example
2001:db8::1 doc6.example
"""
ALLOWLIST = """
# the stand-in's own names
allowed.example
tls.example
.wide.example
allowed.example:8443
inside.example
loop.example
unspecified6.example
loop6.example
nat64.example
link6.example
ula6.example
sixtofour.example
discard6.example
doc6.example
"""
GREETING = "stand-in"
# 80 and 8443 answer HTTP; 443 greets whoever connects, so a tunnel to it shows at once that it reached the server
_WEB = f"mkdir /w; echo {GREETING} >/w/index.html; httpd -p 80 -h /w; httpd -p 8443 -h /w"
SERVE = f"{_WEB}; nc -ll -p 443 -e echo {GREETING}"
# This machine's own programs in a job container (the example image is a static busybox): its /usr, where Debian keeps
# curl, python3, git and node, and the library folders that point into it.
HOST_PROGRAMS = {path: {"bind": path, "mode": "ro"} for path in ("/usr", "/lib", "/lib64")}
# HTTPS with a certificate for tls.example, whose CA the folder's ca.pem holds; any path answers the greeting, a git
# repository's dumb-protocol ref list (one branch) included
TLS_SERVER = f"""
import http.server, ssl
class Answer(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        said = "1" * 40 + "\\trefs/heads/stand-in\\n" if "/info/refs" in self.path else "{GREETING}\\n"
        body = said.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
server = http.server.ThreadingHTTPServer(("", 443), Answer)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain("/tls/cert.pem", "/tls/key.pem")
server.socket = context.wrap_socket(server.socket, server_side=True)
server.serve_forever()
"""


@dataclass(frozen=True)
class StandIn:
    """Two servers of a stand-in internet: the one the names in the allowlist reach, and one they do not."""

    allowed: str
    denied: str
    tls: str | None = None  # an HTTPS server for tls.example, when asked for

    @property
    def hosts(self) -> str:
        named = HOSTS.format(allowed=self.allowed, denied=self.denied)
        return named + (f"{self.tls} tls.example\n" if self.tls is not None else "")


@contextlib.contextmanager
def stand_in_internet(client: Any, image: str, subnet: str, tls: Path | None = None) -> Iterator[StandIn]:
    """Two servers (80 and 8443 answer HTTP, 443 greets) on `subnet` (a block of 203.0.113.0/24), reachable from the
    host; with `tls` (a folder of cert.pem and key.pem), a third answering HTTPS for tls.example."""
    from docker.types import IPAMConfig, IPAMPool

    block = ipaddress.IPv4Network(subnet)
    assert block.subnet_of(ipaddress.IPv4Network("203.0.113.0/24")), "documentation addresses only"
    stand_in = StandIn(str(block[10]), str(block[11]), str(block[12]) if tls is not None else None)
    network = client.networks.create(
        f"pi-test-internet-{uuid.uuid4().hex[:8]}", ipam=IPAMConfig(pool_configs=[IPAMPool(subnet=subnet)])
    )
    servers = []
    try:
        for address in (stand_in.allowed, stand_in.denied):
            server = client.containers.create(
                image, entrypoint=["/bin/busybox", "sh", "-c", SERVE], network=network.name, detach=True
            )
            network.disconnect(server)
            network.connect(server, ipv4_address=address)
            server.start()
            servers.append(server)
        if tls is not None and stand_in.tls is not None:
            server = client.containers.create(
                image, entrypoint=["/usr/bin/python3", "-c", TLS_SERVER], network=network.name, detach=True,
                volumes={**HOST_PROGRAMS, str(tls): {"bind": "/tls", "mode": "ro"}},
            )  # fmt: skip
            network.disconnect(server)
            network.connect(server, ipv4_address=stand_in.tls)
            server.start()
            servers.append(server)
        for address in (stand_in.allowed, stand_in.denied, *([stand_in.tls] if stand_in.tls else [])):
            until_listening(address, 443)
        yield stand_in
    finally:
        for server in servers:
            server.remove(force=True)
        network.remove()


@dataclass(frozen=True)
class Proxy:
    address: str
    port: int
    state: Path


@contextlib.contextmanager
def running_squid(
    squid_binary: str,
    stand_in: StandIn,
    listen: str = "127.0.0.1",
    allowlist: str = ALLOWLIST,
    port: int = 0,
    others: Sequence[Listener] = (),
) -> Iterator[Proxy]:
    """squid in the foreground with the rendered rules for `allowlist`, names resolved to the stand-in, on `port`
    (a free one when 0), and each of `others` on the same port of its own address."""
    with tempfile.TemporaryDirectory(prefix="pi-test-squid-") as made:  # not under pytest's 0700 folders
        state = Path(made)
        state.chmod(0o777)  # squid drops to Debian's proxy user once it has its port
        (state / "hosts").write_text(stand_in.hosts)
        port = port or free_port(listen)
        place = ProxyPlace(listen, state, port, hosts_file=state / "hosts", user="proxy")
        (state / "squid.conf").write_text(squid_config(parse_allowlist(allowlist, "test"), place, others))
        squid = subprocess.Popen([squid_binary, "-N", "-f", str(state / "squid.conf")], stderr=subprocess.PIPE)
        try:
            for address in (listen, *(other.listen for other in others)):
                until_listening(address, port, squid)
            yield Proxy(listen, port, state)
        finally:
            squid.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                squid.wait(CEILING_S)
            squid.kill()
            squid.wait()
            if squid.stderr is not None:
                squid.stderr.close()


def free_port(address: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((address, 0))
        return int(probe.getsockname()[1])


def until_listening(host: str, port: int, process: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + CEILING_S
    while True:
        if process is not None and process.poll() is not None:
            said = process.stderr.read() if process.stderr else b""
            raise AssertionError(f"squid exited {process.returncode}: {said!r}")
        if answers(host, port):
            return
        assert time.monotonic() < deadline, f"nothing listens on {host}:{port}"
        time.sleep(0.05)


def tunnel(gateway: str, port: int, target: str) -> str:
    """A shell expression for a job: the proxy's answer to a tunnel to `target`, then what the server there says
    first (the stand-in's 443 greets)."""
    request = f"CONNECT {target} HTTP/1.1\\r\\nHost: {target}\\r\\n\\r\\n"
    # stdin held open a while: busybox nc closes its side at the end of its input, before the greeting is back
    return f"$( (printf '{request}'; sleep 5) | nc -w 5 {gateway} {port} 2>&1 | tr '\\r\\n' '  ')"


@dataclass(frozen=True)
class EgressNetwork:
    name: str
    bridge: str
    gateway: str


@contextlib.contextmanager
def egress_network(client: Any, name: str = "", bridge: str = "") -> Iterator[EgressNetwork]:
    """An egress network of the test's own (or `name` on `bridge`), internal, with the proxy's rules for PROXY_PORT on
    its gateway (as `pi-dispatch egress-proxy` makes them); its rules and itself removed after."""
    from docker.errors import APIError

    from pi_dispatch.core.egress import PROXY_PORT
    from pi_dispatch.worker.gates.jobnetwork import (
        apply_rules,
        drop_rules,
        egress_rules_for,
        ensure_network,
        gateway_of,
    )

    suffix = uuid.uuid4().hex[:6]
    name, bridge = name or f"pi-egress-w{suffix}", bridge or f"piew{suffix}"
    ensure_network(client, name, bridge, internal=True)
    rules: list[Any] = []
    try:
        gateway = gateway_of(client, name)
        rules = egress_rules_for(bridge, gateway, PROXY_PORT)
        apply_rules(rules)
        yield EgressNetwork(name, bridge, gateway)
    finally:
        drop_rules(rules)
        for network in client.networks.list(names=[name]):
            with contextlib.suppress(APIError):  # a container left on it: the daemon says so; the test has failed
                network.remove()


def tls_files(folder: Path, name: str = "tls.example") -> Path:
    """A CA of the test's own (ca.pem) and a certificate it signed for `name` (cert.pem, key.pem) in `folder`."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pi-dispatch test CA")])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    certificate = (
        x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    pem = serialization.Encoding.PEM
    (folder / "ca.pem").write_bytes(ca.public_bytes(pem))
    (folder / "cert.pem").write_bytes(certificate.public_bytes(pem))
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    (folder / "key.pem").write_bytes(key_pem)
    return folder
