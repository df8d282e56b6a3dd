"""The egress proxy's rules, run by Debian's real squid against a stand-in internet on documentation addresses
(a block of 203.0.113.0/24, a Docker network of this test's own), names pinned in a hosts file of its own."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from pi_dispatch.core.egress import DENIED_LOG, parse_allowlist, parse_denied
from pi_dispatch.infra.squid import Listener, ProxyPlace, squid_config
from tests.support.egress import CEILING_S, Proxy, running_squid, stand_in_internet

pytestmark = [pytest.mark.docker, pytest.mark.squid]


SUBNET = "203.0.113.0/26"
ALLOWED_IP = "203.0.113.10"  # what the stand-in's allowed name resolves to


@pytest.fixture(scope="module")
def running(docker_client: Any, job_image: str, squid_binary: str) -> Iterator[Proxy]:
    """squid on loopback with the rendered rules, the stand-in internet behind it."""
    with stand_in_internet(docker_client, job_image, SUBNET) as stand_in:
        assert stand_in.allowed == ALLOWED_IP
        with running_squid(squid_binary, stand_in) as started:
            yield started


@pytest.fixture
def proxy(running: Proxy) -> int:
    return running.port


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
        return status, head + _read_all(connection)  # the server may have spoken first, with the head


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
    # Through the tunnel: a request to the HTTP server on 8443; nothing to the greeter on 443, which speaks first and
    # closes without reading (a request it never read would make its close a reset, and the greeting could be lost).
    then = "GET / HTTP/1.0\r\nHost: stand-in\r\n\r\n" if target.endswith(":8443") else ""
    return _exchange(port, f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n", then)


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
        ("unspecified6.example:443", "a listed name that resolves to ::, which reaches this host"),
        ("loop6.example:443", "a listed name that resolves to IPv6 loopback"),
        ("nat64.example:443", "a listed name that resolves to NAT64's 64:ff9b::/96 (10.0.0.1 inside)"),
        ("sixtofour.example:443", "a listed name that resolves to 6to4's 2002::/16 (10.0.0.1 inside)"),
        ("link6.example:443", "a listed name that resolves to IPv6 link-local"),
        ("ula6.example:443", "a listed name that resolves to a unique local address"),
        ("discard6.example:443", "a listed name that resolves to the discard prefix"),
        ("doc6.example:443", "a listed name that resolves to documentation addresses"),
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


def test_each_refusal_is_logged_with_its_host_and_port_and_nothing_allowed_is(running: Proxy) -> None:
    marker = f"refused-{time.time_ns()}.example"
    assert connect(running.port, f"{marker}:443")[0] == 403
    assert plain(running.port, f"http://{marker}/a/path?with=a-secret")[0] == 403
    assert connect(running.port, "allowed.example:443")[0] == 200
    log = running.state / DENIED_LOG
    deadline = time.monotonic() + CEILING_S
    while True:  # squid writes its log lines as it goes; only a hang reaches the ceiling
        lines = log.read_text().splitlines() if log.exists() else []
        mine = [found for line in lines if (found := parse_denied(line)) is not None and found.host == marker]
        if len(mine) >= 2:
            break
        assert time.monotonic() < deadline, lines
        time.sleep(0.05)
    assert {(found.method, found.port, found.client) for found in mine} == {
        ("CONNECT", 443, "127.0.0.1"),
        ("GET", 80, "127.0.0.1"),
    }
    assert all(abs(found.at_ms - time.time() * 1000) < 600_000 for found in mine)
    text = log.read_text()
    assert "a-secret" not in text and "/a/path" not in text, text
    assert "CONNECT allowed.example 443" not in text, text  # the tunnel it allowed


@pytest.mark.parametrize(
    "allowlist",
    [
        "",
        "# nothing but a comment\n",
        "api.anthropic.com\n.github.com\nregistry.npmjs.org\n",
        "registry.example:8443\nregistry.example\n.wide.example:22\n",
        "198.51.100.7\n198.51.100.7:8443\n[2001:db8::1]\n",
    ],
    ids=["empty", "comment", "reference", "ports", "literals"],
)
def test_every_rendered_configuration_is_one_squid_accepts(
    squid_binary: str, allowlist: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    state = tmp_path_factory.mktemp("parse")
    conf = state / "squid.conf"
    conf.write_text(squid_config(parse_allowlist(allowlist, "test"), ProxyPlace("127.0.0.1", state, 3128)))
    parsed = subprocess.run(
        [squid_binary, "-k", "parse", "-f", str(conf)], capture_output=True, text=True, timeout=60, check=False
    )
    said = parsed.stdout + parsed.stderr
    assert parsed.returncode == 0 and "ERROR" not in said and "FATAL" not in said, said
    assert "is a subnetwork of" not in said, said  # no range that squid widens to every address


def test_a_configuration_with_a_listener_per_profile_list_is_one_squid_accepts(
    squid_binary: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    state = tmp_path_factory.mktemp("listeners")
    conf = state / "squid.conf"
    others = [
        Listener("127.0.0.2", parse_allowlist("registry.example:8443\n.cdn.example\n", "narrow")),
        Listener("127.0.0.3", parse_allowlist("api.example.com\n", "deploy")),
    ]
    text = squid_config(parse_allowlist("api.example.com\n", "host"), ProxyPlace("127.0.0.1", state, 3128), others)
    conf.write_text(text)
    parsed = subprocess.run(
        [squid_binary, "-k", "parse", "-f", str(conf)], capture_output=True, text=True, timeout=60, check=False
    )
    said = parsed.stdout + parsed.stderr
    assert parsed.returncode == 0 and "ERROR" not in said and "FATAL" not in said, said
    # each list is allowed only on its own port: no rule without its listener's name
    assert all(line.split()[2].startswith("in") for line in text.splitlines() if line.startswith("http_access allow"))
    assert text.count("http_port ") == 3 and "http_port 127.0.0.2:3128 name=in1" in text
