"""`pi-dispatch egress-proxy` as its unit runs it (root, in the foreground), on this machine's Docker, firewall and
Debian's squid: it reads the allowlist beside the worker's env file, puts the egress network and its rules in
place, and becomes squid on the network's gateway; a job on that network then reaches a listed address only.
`--check` says what is not up; a bad allowlist is a config error (exit 2) naming its line."""

from __future__ import annotations

import contextlib
import grp
import pwd
import secrets
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pi_dispatch.core.egress import ALLOWLIST_FILE, DENIED_LOG, PROXY_PORT, parse_allowlist
from pi_dispatch.core.egressprofiles import EgressNetwork
from pi_dispatch.worker.gates.jobnetwork import NO_RESOLVER, drop_rules, egress_rules_for, gateway_of
from pi_dispatch.worker.host.egressproxy import OWNER_LABEL, owner_mark
from tests.support.egress import GREETING, stand_in_internet, until_listening
from tests.support.helpers import run_cli

pytestmark = [pytest.mark.docker, pytest.mark.squid, pytest.mark.slow]
SUBNET = "203.0.113.192/26"  # its own block of the stand-in internet


@pytest.fixture
def place(docker_client: Any) -> Iterator[list[str]]:
    """The command's arguments for a network, bridge and state folder of the test's own; all removed after."""
    suffix = secrets.token_hex(3)
    name, bridge = f"pi-egress-c{suffix}", f"piec{suffix}"
    state = tempfile.TemporaryDirectory(prefix="pi-test-egress-")  # not under pytest's 0700 folders
    Path(state.name).chmod(0o755)  # squid, as proxy, reaches the state folder the command makes its own
    arguments = ["--name", name, "--bridge", bridge, "--state-dir", str(Path(state.name) / "state")]
    try:
        yield arguments
    finally:
        mark = f"{OWNER_LABEL}={owner_mark(Path(arguments[5]))}"
        for network in docker_client.networks.list(filters={"label": mark}):  # a profile's, if the test failed
            with contextlib.suppress(Exception):
                network.remove()
        state.cleanup()
        for network in docker_client.networks.list(names=[name]):
            with contextlib.suppress(Exception):
                gateway = gateway_of(docker_client, name)
                drop_rules(egress_rules_for(bridge, gateway, PROXY_PORT))
            with contextlib.suppress(Exception):
                network.remove()


def test_the_proxy_command_sets_up_egress_and_becomes_squid(
    docker_client: Any, job_image: str, squid_binary: str, place: list[str], tmp_path: Path
) -> None:
    env_file = tmp_path / "worker.env"
    name = place[1]
    with stand_in_internet(docker_client, job_image, SUBNET) as stand_in:
        (tmp_path / ALLOWLIST_FILE).write_text(f"# the stand-in's allowed server\n{stand_in.allowed}\n")
        # a profile's own list, the other server only (a name of the test's own makes its network unique)
        narrow = f"{stand_in.denied}\nt{secrets.token_hex(4)}.example\n"
        (tmp_path / "narrow.conf").write_text(narrow)
        env_file.write_text(f"PI_CONCURRENCY=1\nPI_EGRESS_PROFILES=narrow:{tmp_path}/narrow.conf\n")
        own = EgressNetwork.of(parse_allowlist(narrow, "test"))
        assert run_cli("egress-proxy", *place, "--check").returncode == 1  # nothing up yet
        proxy = _proxy(env_file, place)
        try:
            gateway = _gateway_once_made(docker_client, name, proxy)
            _until_serving(gateway, proxy)
            checked = run_cli("egress-proxy", "--env-file", str(env_file), *place, "--check")
            assert checked.returncode == 0, checked.stdout
            resolv = tmp_path / "resolv.conf"
            resolv.write_text(NO_RESOLVER)
            seen = _through(docker_client, job_image, name, resolv, gateway, [stand_in.allowed, stand_in.denied])
            profile_gateway = gateway_of(docker_client, own.name)
            targets = [stand_in.allowed, stand_in.denied]
            seen_by_profile = _through(docker_client, job_image, own.name, resolv, profile_gateway, targets)
        finally:
            proxy.send_signal(signal.SIGTERM)  # squid itself, in the command's place
            said = proxy.communicate(timeout=60)[0].decode(errors="replace")
        # the list no longer declared: its network goes at the proxy's next start
        env_file.write_text("PI_CONCURRENCY=1\n")
        again = _proxy(env_file, place)
        try:
            _until_serving(gateway, again)
            kept = [network.name for network in docker_client.networks.list(names=[own.name])]
        finally:
            again.send_signal(signal.SIGTERM)
            again.communicate(timeout=60)
    assert "destinations allowed, 1 profile lists; squid starts" in said, said
    assert "200" in seen[0] and GREETING in seen[0], seen
    assert "403" in seen[1] and GREETING not in seen[1], seen
    # on the profile's network, its own list: the other way round
    assert "403" in seen_by_profile[0] and GREETING not in seen_by_profile[0], seen_by_profile
    assert "200" in seen_by_profile[1] and GREETING in seen_by_profile[1], seen_by_profile
    assert kept == [], kept
    gone = run_cli("egress-proxy", *place, "--check")
    assert gone.returncode == 1 and "missing: the proxy" in gone.stdout, gone.stdout
    # squid's user writes the refusal log; the worker's group (--log-group) reads it, no one else
    state = Path(place[5])
    for path, mode in ((state, 0o750), (state / DENIED_LOG, 0o640)):
        found = path.stat()
        assert (pwd.getpwuid(found.st_uid).pw_name, grp.getgrgid(found.st_gid).gr_name) == ("proxy", "nogroup")
        assert stat.S_IMODE(found.st_mode) == mode, (path, oct(found.st_mode))


def test_a_bad_allowlist_is_refused_by_line_with_exit_2(place: list[str], tmp_path: Path) -> None:
    env_file = tmp_path / "worker.env"
    env_file.write_text("PI_CONCURRENCY=1\n")
    (tmp_path / ALLOWLIST_FILE).write_text("api.example.com\n*.example.org\n")
    refused = run_cli("egress-proxy", "--env-file", str(env_file), *place)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "line 2" in refused.stderr and "wildcard" in refused.stderr and "Traceback" not in refused.stderr
    (tmp_path / ALLOWLIST_FILE).unlink()
    missing = run_cli("egress-proxy", "--env-file", str(env_file), *place)
    assert missing.returncode == 2 and "PI_EGRESS_ALLOWLIST_FILE" in missing.stderr, missing.stderr


def _proxy(env_file: Path, place: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "pi_dispatch", "egress-proxy", "--env-file", str(env_file), *place,
         "--log-group", "nogroup"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip


def _gateway_once_made(client: Any, name: str, proxy: subprocess.Popen[bytes]) -> str:
    """The network's gateway, once the command has made it (a ceiling only a hang reaches)."""
    deadline = time.monotonic() + 60
    while not client.networks.list(names=[name]):
        assert proxy.poll() is None, proxy.communicate()[0]
        assert time.monotonic() < deadline, "the egress network was never made"
        time.sleep(0.05)
    return gateway_of(client, name)


def _until_serving(gateway: str, proxy: subprocess.Popen[bytes]) -> None:
    try:
        until_listening(gateway, PROXY_PORT)
    except AssertionError:
        proxy.kill()
        raise AssertionError(proxy.communicate()[0].decode(errors="replace")) from None


def _through(client: Any, image: str, network: str, resolv: Path, gateway: str, targets: list[str]) -> list[str]:
    """What a job on `network` reads through a tunnel of the proxy to each target's port 443."""
    lines = []
    for target in targets:
        request = f"CONNECT {target}:443 HTTP/1.1\\r\\nHost: {target}:443\\r\\n\\r\\n"
        # stdin held open a while: busybox nc closes its side at the end of its input, before the greeting is back
        lines.append(
            f"echo \"$( (printf '{request}'; sleep 5) | nc -w 5 {gateway} {PROXY_PORT} 2>&1 | tr '\\r\\n' '  ')\""
        )
    output = client.containers.run(
        image, ["; ".join(lines)], entrypoint=["/bin/busybox", "sh", "-c"], network=network,
        volumes={str(resolv): {"bind": "/etc/resolv.conf", "mode": "ro"}}, remove=True,
    )  # fmt: skip
    return list(output.decode(errors="replace").splitlines())
