"""The egress network on this machine's Docker and firewall (root), with Debian's squid on its gateway and a
stand-in internet on documentation addresses: a job's one way out is the proxy, which lets it reach a listed name
only; its direct connections, its name lookups, the host and its neighbours are refused at once, not timed out."""

from __future__ import annotations

import contextlib
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pi_dispatch.worker.gates.jobnetwork import (
    IPTABLES,
    NO_RESOLVER,
    apply_rules,
    drop_rules,
    egress_rules_for,
    ensure_network,
    gateway_of,
    missing_rules,
    stale_proxy_rules,
)
from tests.support.egress import (
    GREETING,
    HOST_PROGRAMS,
    running_squid,
    stand_in_internet,
    tls_files,
    tunnel,
)

pytestmark = [pytest.mark.docker, pytest.mark.squid, pytest.mark.slow]
SUBNET = "203.0.113.64/26"  # its own block of the stand-in internet
REFUSED = "Connection refused"  # what a reset reads as: refused at once, where a dropped packet hangs


@pytest.fixture
def egress_network(docker_client: Any) -> Iterator[tuple[str, str]]:
    """A fresh egress network of the test's own: its name and bridge; its rules and itself removed after."""
    suffix = secrets.token_hex(3)
    name, bridge = f"pi-egress-t{suffix}", f"piet{suffix}"
    try:
        yield name, bridge
    finally:
        for network in docker_client.networks.list(names=[name]):
            with contextlib.suppress(Exception):
                network.remove()


def in_job(client: Any, image: str, network: str, resolv: Path, script: str) -> dict[str, str]:
    """What one job container on `network` prints for each `name=$(...)` line of `script`."""
    output = client.containers.run(
        image,
        [script],
        entrypoint=["/bin/busybox", "sh", "-c"],
        network=network,
        volumes={str(resolv): {"bind": "/etc/resolv.conf", "mode": "ro"}},
        remove=True,
    )
    lines = output.decode(errors="replace").splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def test_a_job_on_the_egress_network_goes_out_through_the_proxy_only(
    docker_client: Any, job_image: str, squid_binary: str, egress_network: tuple[str, str], tmp_path: Path
) -> None:
    name, bridge = egress_network
    assert ensure_network(docker_client, name, bridge, internal=True)
    assert not ensure_network(docker_client, name, bridge, internal=True)  # there already: kept
    gateway = gateway_of(docker_client, name)
    resolv = tmp_path / "resolv.conf"
    resolv.write_text(NO_RESOLVER)
    neighbour = docker_client.containers.run(
        job_image, ["while true; do echo hi | nc -l -p 8080; done"], entrypoint=["/bin/busybox", "sh", "-c"],
        network=name, detach=True,
    )  # fmt: skip
    rules: list[Any] = []
    try:
        neighbour.reload()
        neighbour_ip = neighbour.attrs["NetworkSettings"]["Networks"][name]["IPAddress"]
        with (
            stand_in_internet(docker_client, job_image, SUBNET) as stand_in,
            running_squid(squid_binary, stand_in, gateway) as proxy,
        ):
            rules = egress_rules_for(bridge, gateway, proxy.port)
            assert len(apply_rules(rules)) == len(rules) and missing_rules(rules) == []
            assert apply_rules(rules) == []  # in place: nothing added
            via = f"http://{gateway}:{proxy.port}"
            seen = in_job(
                docker_client, job_image, name, resolv,
                "; ".join([
                    f'echo "allowed={tunnel(gateway, proxy.port, "allowed.example:443")}"',
                    f'echo "denied={tunnel(gateway, proxy.port, "denied.example:443")}"',
                    f'echo "plain=$(http_proxy={via} wget -q -O - http://allowed.example/ 2>&1)"',
                    f'echo "direct=$(nc -w 5 {stand_in.allowed} 443 </dev/null 2>&1)"',
                    f'echo "host=$(nc -w 5 {gateway} 22 </dev/null 2>&1)"',
                    f'echo "neighbour=$(nc -w 5 {neighbour_ip} 8080 </dev/null 2>&1)"',
                    'echo "lookup=$(nslookup allowed.example 2>&1 | tr "\\n" " ")"',
                ]),
            )  # fmt: skip
    finally:
        drop_rules(rules)
        neighbour.remove(force=True)
    assert "200" in seen["allowed"] and GREETING in seen["allowed"], seen
    assert "403" in seen["denied"] and GREETING not in seen["denied"], seen
    assert seen["plain"].strip() == GREETING, seen
    for what in ("direct", "host", "neighbour"):  # each refused by a rule at once, none left to time out
        assert REFUSED in seen[what], (what, seen)
    assert REFUSED in seen["lookup"] and stand_in.allowed not in seen["lookup"], seen  # no resolver: nothing asked


def test_rules_put_back_in_order_when_one_is_missing(egress_network: tuple[str, str]) -> None:
    """Were the missing refusal inserted alone at the top, it would land before the proxy's ACCEPT and shut the
    one way out."""
    _, bridge = egress_network
    rules = egress_rules_for(bridge, "192.0.2.1", 3128)
    try:
        apply_rules(rules)
        drop_rules([rules[1]])
        assert apply_rules(rules) == [rules[1]]
        shown = subprocess.run([*IPTABLES, "-S", "INPUT"], check=True, capture_output=True, text=True).stdout
        ours = [line for line in shown.splitlines() if f"-i {bridge} " in line]
        assert "ACCEPT" in ours[0] and "tcp-reset" in ours[1] and "icmp-admin-prohibited" in ours[2], ours
    finally:
        drop_rules(rules)


def test_a_proxy_rule_left_by_an_earlier_gateway_is_found_and_only_it(egress_network: tuple[str, str]) -> None:
    _, bridge = egress_network
    earlier, now = egress_rules_for(bridge, "192.0.2.1", 3128), egress_rules_for(bridge, "192.0.2.129", 3128)
    try:
        apply_rules(earlier)
        apply_rules(now)
        stale = stale_proxy_rules(bridge, "192.0.2.129")
        assert stale == [earlier[0]], stale  # the earlier gateway's ACCEPT; the refusals are the same rules
        drop_rules(stale)
        assert stale_proxy_rules(bridge, "192.0.2.129") == [] and missing_rules(now) == []
    finally:
        drop_rules(earlier + now)


# What a job's programs do with the proxy's variables (`core/egress.proxy_environment`), as each is run by agents:
# curl, Python's urllib, git over HTTPS and Node's fetch. Node reads them itself with NODE_USE_ENV_PROXY=1 from 22.21
# and 24; an older Node (this machine's 20) needs undici's EnvHttpProxyAgent installed as its dispatcher, as the
# reference's runner does.
FETCH_PY = """
import ssl, sys, urllib.request
try:
    answer = urllib.request.urlopen(sys.argv[1], context=ssl.create_default_context(cafile="/work/ca.pem"), timeout=10)
    print(answer.read().decode().strip())
except Exception as error:
    print("error", error)
"""
FETCH_MJS = """
const [major, minor] = process.versions.node.split(".").map(Number);
if (!(major >= 24 || (major === 22 && minor >= 21))) {
  const { EnvHttpProxyAgent, setGlobalDispatcher } = await import("/node_modules/undici/index.js");
  setGlobalDispatcher(new EnvHttpProxyAgent());
}
try {
  const answer = await fetch(process.argv[2]);
  console.log(answer.status, (await answer.text()).trim());
} catch (error) {
  console.log("error", error.cause?.message ?? error.message);
}
"""


@pytest.mark.node
def test_curl_python_git_and_node_reach_a_listed_https_name_through_the_proxy_and_only_it(
    docker_client: Any,
    job_image: str,
    squid_binary: str,
    egress_network: tuple[str, str],
    tmp_path: Path,
    node_modules: Path,
) -> None:
    from pi_dispatch.core.egress import proxy_environment

    (tmp_path / "work").mkdir()
    work = tls_files(tmp_path / "work")
    (work / "fetch.py").write_text(FETCH_PY)
    (work / "fetch.mjs").write_text(FETCH_MJS)
    name, bridge = egress_network
    ensure_network(docker_client, name, bridge, internal=True)
    gateway = gateway_of(docker_client, name)
    resolv = tmp_path / "resolv.conf"
    resolv.write_text(NO_RESOLVER)
    rules: list[Any] = []
    clients = {
        "curl": "curl -sS --cacert /work/ca.pem {url}",
        "python": "python3 /work/fetch.py {url}",
        "git": "git -c http.sslCAInfo=/work/ca.pem ls-remote {url}/repo.git",
        "node": "NODE_EXTRA_CA_CERTS=/work/ca.pem node /work/fetch.mjs {url}",
    }
    try:
        with (
            stand_in_internet(docker_client, job_image, SUBNET, tls=work) as stand_in,
            running_squid(squid_binary, stand_in, gateway) as proxy,
        ):
            rules = egress_rules_for(bridge, gateway, proxy.port)
            apply_rules(rules)
            lines = [
                f'echo "{client}_{which}=$({command.format(url=url)} 2>&1 | tr "\\t\\n" "  ")"'
                for client, command in clients.items()
                for which, url in (("listed", "https://tls.example"), ("unlisted", "https://denied.example"))
            ]
            output = docker_client.containers.run(
                job_image, ["; ".join(lines)], entrypoint=["/bin/busybox", "sh", "-c"], network=name,
                environment={**proxy_environment(gateway, proxy.port), "HOME": "/tmp"},
                volumes={
                    **HOST_PROGRAMS, str(work): {"bind": "/work", "mode": "ro"},
                    str(node_modules): {"bind": "/node_modules", "mode": "ro"},
                    str(resolv): {"bind": "/etc/resolv.conf", "mode": "ro"},
                },
                remove=True,
            )  # fmt: skip
    finally:
        drop_rules(rules)
    seen = dict(line.split("=", 1) for line in output.decode(errors="replace").splitlines() if "=" in line)
    assert seen["curl_listed"].strip() == GREETING and seen["python_listed"].strip() == GREETING, seen
    assert seen["node_listed"].strip() == f"200 {GREETING}", seen
    assert "refs/heads/stand-in" in seen["git_listed"], seen
    for client in clients:  # each went through the proxy, which refused the unlisted name
        assert GREETING not in seen[f"{client}_unlisted"] and "refs/heads" not in seen[f"{client}_unlisted"], seen
    assert all("403" in seen[f"{client}_unlisted"] for client in ("curl", "python", "git")), seen
