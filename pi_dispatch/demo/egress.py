"""The demo's egress proxy: the fleet's jobs go out only through it, as the example inventory has them on its hosts.

Where this machine allows it (root, for the firewall rules, and Debian's squid), the demo runs `pi-dispatch
egress-proxy` on a network of its own (never a real host's `pi-egress`), with the example's allowlist, and its workers
run with PI_EGRESS on; on exit the proxy stops and its network and rules go. Elsewhere the workers run with PI_EGRESS=0
and the demo says why.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Final

from rich.console import Console

from pi_dispatch.config.hostvars import InventoryHost
from pi_dispatch.core.egress import PROXY_PORT, allowlist_text
from pi_dispatch.core.errors import ConfigError
from pi_dispatch.infra.dockerclient import docker_client
from pi_dispatch.worker.gates.jobnetwork import JobNetworkError, drop_rules, egress_rules_for, gateway_of
from pi_dispatch.worker.host.egressproxy import EgressPlace, missing, squid_binary

START_CEILING_S: Final = 30.0  # squid answers within a second or two; only a hang reaches this
STOP_CEILING_S: Final = 10.0


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "the egress proxy's firewall rules need root"
    try:
        squid_binary()
    except JobNetworkError as error:
        return str(error)
    if shutil.which("iptables") is None and not Path("/usr/sbin/iptables").exists():
        return "no iptables here"
    return None


@contextlib.contextmanager
def demo_egress(console: Console, entries: Sequence[str]) -> Iterator[dict[str, str]]:
    """The workers' egress settings while the demo runs: its own proxy's, or PI_EGRESS=0 where it cannot run one."""
    why = _why_not()
    if why is None:
        try:
            text = allowlist_text(list(entries), "pi_dispatch_worker_egress_allowlist")
        except ConfigError as error:
            why = f"the example's allowlist is refused ({error})"
    if why is not None:
        console.print(f"[yellow]Egress: off ({why}).[/yellow] Jobs reach what Docker's default network reaches.")
        yield {"PI_EGRESS": "0"}
        return
    suffix = secrets.token_hex(3)
    network, bridge = f"pi-egress-demo-{suffix}", f"pied{suffix}"
    with tempfile.TemporaryDirectory(prefix="pi-dispatch-demo-egress-") as made:
        folder = Path(made)
        folder.chmod(0o755)  # squid, as Debian's proxy user, reaches its state folder inside
        (folder / "egress-allowlist.conf").write_text(text)
        (folder / "proxy.env").write_text(f"PI_EGRESS_ALLOWLIST_FILE={folder / 'egress-allowlist.conf'}\n")
        state = folder / "state"
        command = [sys.executable, "-m", "pi_dispatch", "egress-proxy", "--env-file", str(folder / "proxy.env")]
        command += ["--name", network, "--bridge", bridge, "--state-dir", str(state)]
        with (folder / "proxy.log").open("wb") as log:
            proxy = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            if not _until_up(EgressPlace(network, bridge, state_dir=state), proxy):
                said = (folder / "proxy.log").read_text(errors="replace").strip().splitlines()[-1:]
                console.print(f"[yellow]Egress: off (the proxy did not start: {' '.join(said)}).[/yellow]")
                yield {"PI_EGRESS": "0"}
                return
            listed = sum(1 for line in text.splitlines() if line.strip() and not line.startswith("#"))
            console.print(
                f"Egress: on. Jobs run on {network}, whose one way out is squid on its gateway, port {PROXY_PORT}, "
                f"to the {listed} names of the example's allowlist; each refusal is recorded in the job's attempt."
            )
            yield {"PI_EGRESS": "1", "PI_JOB_NETWORK": network, "PI_EGRESS_STATE_DIR": str(state)}
        finally:
            _stop(proxy)
            _take_down(network, bridge)


def _until_up(place: EgressPlace, proxy: subprocess.Popen[bytes]) -> bool:
    """Whether the proxy is up (what `egress-proxy --check` asks) before it exits or the ceiling passes."""

    client = docker_client()
    try:
        deadline = time.monotonic() + START_CEILING_S
        while time.monotonic() < deadline and proxy.poll() is None:
            with contextlib.suppress(JobNetworkError):  # its network made, its rules not yet: not up yet
                if not missing(client, place):
                    return True
            time.sleep(0.2)
        return False
    finally:
        client.close()


def _stop(proxy: subprocess.Popen[bytes]) -> None:
    proxy.terminate()  # squid itself, in the command's place: it stops within its shutdown_lifetime
    try:
        proxy.wait(STOP_CEILING_S)
    except subprocess.TimeoutExpired:
        proxy.kill()
        proxy.wait()


def _take_down(network: str, bridge: str) -> None:
    """The demo's network and its rules, gone (nothing of the demo is left on this machine)."""
    import docker
    import docker.errors

    client = docker_client()
    try:
        with contextlib.suppress(JobNetworkError):
            drop_rules(egress_rules_for(bridge, gateway_of(client, network), PROXY_PORT))
        with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
            client.networks.get(network).remove()
    finally:
        client.close()


def allowlist(hosts: Sequence[InventoryHost]) -> list[str]:
    """The entries every host's inventory lists (`pi_dispatch_worker_egress_allowlist`), once each, in order: the
    demo runs one proxy for its hosts, where each would run its own."""
    entries: list[str] = []
    for host in hosts:
        listed = host.declared("egress_allowlist")
        for entry in listed if isinstance(listed, list) else []:
            if isinstance(entry, str) and entry not in entries:
                entries.append(entry)
    return entries
