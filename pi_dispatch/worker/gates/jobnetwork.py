"""The job network: a Docker bridge of its own for job containers, and the host firewall rules that keep its jobs
off the host, the store and every private, shared or link-local range, while the internet stays reachable.

On Docker's default bridge a job reaches the host's own addresses, the LAN (the store among them) and a cloud's
metadata address (169.254.169.254). Here the bridge has a fixed interface name, so two kinds of rule can name it:
in `DOCKER-USER` (Docker's chain for the operator's rules, evaluated before its own on forwarded traffic) each
denied range is rejected for what comes in from the bridge; in `INPUT` everything from the bridge to the host
itself is rejected, whatever addresses the host has. Jobs on it do not reach each other either (inter-container
traffic off). Name resolution is unaffected: Docker's resolver answers inside each container and asks upstream
from the host's side. Rules are rejected, not dropped, so a job that tries fails at once instead of hanging.

Applied by `pi-dispatch job-network` as root (the role runs it from a oneshot unit each time Docker starts);
idempotent: what is there is checked (`iptables -C`) and only what is missing is inserted. IPv4 only: the network
is made without IPv6, and each job's container with IPv6 off (`jobspec.IPV6_OFF`: Docker 20.10 gave containers an
IPv6 link-local address all the same), so a job has no IPv6 route to be filtered.

With egress on (`core/egress.py`), jobs run on the egress network instead: `--internal` (Docker gives it no way
out), inter-container traffic off, and rules that leave one way out, the proxy on the bridge's gateway; every other
connection to the host or past it is refused at once (a reset for TCP, unreachable for the rest; Docker's own
isolation drops, and a job would hang on it). Its jobs get a resolver that is not there (`NO_RESOLVER`), so a name
lookup fails at once and carries nothing out: the proxy resolves names, the job never does. Docker's own resolver
(127.0.0.11) is still in the job's namespace; its upstream is set to the job's loopback (`jobspec.NO_UPSTREAM`), so
a lookup asked of it goes nowhere either.
"""

from __future__ import annotations

import ipaddress
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from pi_dispatch.core.errors import PiDispatchError

DEFAULT_NETWORK: Final = "pi-jobs"
DEFAULT_BRIDGE: Final = "pi-jobs0"
LABEL: Final = "pi-dispatch.job-network"
# Private (RFC 1918), shared (RFC 6598), link-local with the metadata address (RFC 3927), "this network",
# multicast and reserved: nothing a job needs, everything a job should not touch.
DENIED: Final = (
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "100.64.0.0/10",
    "169.254.0.0/16",
    "0.0.0.0/8",
    "224.0.0.0/4",
    "240.0.0.0/4",
)
REJECT: Final = ("-j", "REJECT", "--reject-with", "icmp-admin-prohibited")
RESET: Final = ("-j", "REJECT", "--reject-with", "tcp-reset")  # a TCP connect is refused, not left unanswered
EGRESS_LABEL: Final = "pi-dispatch.egress-network"
# The resolv.conf an egress job gets: a resolver on its own loopback, where nothing listens.
NO_RESOLVER: Final = "nameserver 127.0.0.1\noptions attempts:1 timeout:1\n"
FORWARD_CHAIN: Final = "DOCKER-USER"
HOST_CHAIN: Final = "INPUT"
IPTABLES: Final = ("iptables", "-w", "10")  # -w: wait for the xtables lock rather than fail beside dockerd

Runner = Callable[..., "subprocess.CompletedProcess[str]"]


class JobNetworkError(PiDispatchError):
    """The network or its rules could not be set up (exit 1), or what is asked is not a network (exit 2)."""


@dataclass(frozen=True)
class Rule:
    chain: str
    spec: tuple[str, ...]

    def shown(self) -> str:
        return f"{self.chain} {' '.join(self.spec)}"


def denied_ranges(extra: Sequence[str] = ()) -> list[str]:
    """The denied ranges, then each extra address or range (a store on a public address), normalised. Raises
    ValueError naming what is not an IPv4 address or range."""
    found = list(DENIED)
    for text in extra:
        network = ipaddress.ip_network(text.strip(), strict=False)
        if network.version != 4:
            raise ValueError(f"{text} is not an IPv4 address or range")
        if str(network) not in found:
            found.append(str(network))
    return found


def rules_for(bridge: str, denied: Sequence[str]) -> list[Rule]:
    """What keeps a job on `bridge` to the internet: each denied range rejected, and the host itself."""
    forward = [Rule(FORWARD_CHAIN, ("-i", bridge, "-d", cidr, *REJECT)) for cidr in denied]
    return [*forward, Rule(HOST_CHAIN, ("-i", bridge, *REJECT))]


def egress_rules_for(bridge: str, gateway: str, port: int) -> list[Rule]:
    """What leaves a job on the egress `bridge` one way out, the proxy at gateway:port; in this order (the first
    match wins), which `apply_rules` keeps."""
    # written as `iptables -S` prints it, so a rule it lists compares equal to the one declared here
    proxy = ("-d", f"{gateway}/32", "-i", bridge, "-p", "tcp", "-m", "tcp", "--dport", str(port), "-j", "ACCEPT")
    refused = [("-i", bridge, "-p", "tcp", *RESET), ("-i", bridge, *REJECT)]
    return [Rule(HOST_CHAIN, proxy), *(Rule(HOST_CHAIN, spec) for spec in refused)] + [
        Rule(FORWARD_CHAIN, spec) for spec in refused
    ]


def stale_proxy_rules(bridge: str, gateway: str, run: Runner = subprocess.run) -> list[Rule]:
    """The proxy's ACCEPT rules for `bridge` that name another gateway than `gateway`: what an egress network made
    again on another subnet leaves behind (harmless, as the refusals name the bridge, but not to be kept)."""
    listed = run([*IPTABLES, "-S", HOST_CHAIN], capture_output=True, text=True, check=False)
    stale = []
    for line in listed.stdout.splitlines() if listed.returncode == 0 else []:
        words = line.split()
        spec = tuple(words[2:])
        ours = words[:2] == ["-A", HOST_CHAIN] and len(spec) > 4 and spec[0] == "-d" and spec[2:4] == ("-i", bridge)
        if ours and spec[-2:] == ("-j", "ACCEPT") and spec[1] != f"{gateway}/32":
            stale.append(Rule(HOST_CHAIN, spec))
    return stale


def missing_rules(rules: Sequence[Rule], run: Runner = subprocess.run) -> list[Rule]:
    """The rules not in place (`iptables -C` per rule). Raises JobNetworkError when iptables cannot be asked."""
    try:
        chain = run([*IPTABLES, "-S", FORWARD_CHAIN], capture_output=True, text=True, check=False)
    except OSError as error:
        raise JobNetworkError(f"iptables cannot be run ({error.strerror}): install iptables") from None
    if chain.returncode != 0:
        raise JobNetworkError(f"no {FORWARD_CHAIN} chain to add to: start the Docker daemon first (it makes it)")
    return [
        rule
        for rule in rules
        if run([*IPTABLES, "-C", rule.chain, *rule.spec], capture_output=True, text=True, check=False).returncode
    ]


def apply_rules(rules: Sequence[Rule], run: Runner = subprocess.run) -> list[Rule]:
    """The rules at the top of their chains (before Docker's RETURN), in their declared order; returns what was
    missing. When one is, the others are taken out and all put back, so a rule inserted alone cannot land before
    one it must follow."""
    missing = missing_rules(rules, run)
    if not missing:
        return []
    drop_rules([rule for rule in rules if rule not in missing], run)
    for rule in reversed(rules):  # inserted at 1 in reverse: they end up in the declared order
        done = run([*IPTABLES, "-I", rule.chain, "1", *rule.spec], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            reason = (done.stderr.strip().splitlines() or ["no reason given"])[-1]
            raise JobNetworkError(f"iptables refused {rule.shown()}: {reason} (run as root)")
    return missing


def drop_rules(rules: Sequence[Rule], run: Runner = subprocess.run) -> None:
    """Each rule taken out of its chain (one that is not there is left as it is)."""
    for rule in rules:
        run([*IPTABLES, "-D", rule.chain, *rule.spec], capture_output=True, text=True, check=False)


def ensure_network(
    client: Any, name: str, bridge: str, *, internal: bool = False, labels: dict[str, str] | None = None
) -> bool:
    """The network, made when absent (True), with `labels` besides its own; an existing one must be a bridge on
    `bridge` (internal when asked), else JobNetworkError."""
    from docker.errors import NotFound

    try:
        found = client.networks.get(name)
    except NotFound:
        options = {"com.docker.network.bridge.name": bridge, "com.docker.network.bridge.enable_icc": "false"}
        label = EGRESS_LABEL if internal else LABEL
        client.networks.create(
            name,
            driver="bridge",
            options=options,
            labels={label: "1", **(labels or {})},
            enable_ipv6=False,
            internal=internal,
        )
        return True
    attributes = found.attrs
    given = (attributes.get("Options") or {}).get("com.docker.network.bridge.name")
    if attributes.get("Driver") != "bridge" or given != bridge or bool(attributes.get("Internal")) != internal:
        kind = "an internal bridge" if internal else "a bridge"
        raise JobNetworkError(
            f"the Docker network {name} exists but is not {kind} named {bridge}: remove it (docker network rm "
            f"{name}) or name another with --name"
        )
    return False


def gateway_of(client: Any, name: str) -> str:
    """The host's address on the network `name` (its bridge's gateway), where the egress proxy listens."""
    from docker.errors import NotFound

    try:
        attributes = client.networks.get(name).attrs
    except NotFound:
        raise JobNetworkError(f"no Docker network {name}: run pi-dispatch egress-proxy, which makes it") from None
    gateway = network_gateway(attributes)
    if gateway is None:
        raise JobNetworkError(f"the Docker network {name} has no gateway: remove it and run egress-proxy again")
    return gateway


def network_gateway(attributes: Any) -> str | None:
    """A network's gateway, as `docker network inspect` gives the network (None when it has none)."""
    pools = (attributes.get("IPAM") or {}).get("Config") or [] if isinstance(attributes, dict) else []
    for pool in pools:
        if isinstance(pool, dict) and pool.get("Gateway"):
            return str(pool["Gateway"]).split("/")[0]
        if isinstance(pool, dict) and pool.get("Subnet"):  # given a subnet alone, Docker takes its first address
            return str(next(ipaddress.ip_network(str(pool["Subnet"]), strict=False).hosts()))
    return None
