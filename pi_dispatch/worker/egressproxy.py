"""The egress proxy of this host's jobs, as `pi-dispatch egress-proxy` runs it: the allowlist read (the reference's
file, `core/egress.py`), the egress network and its rules in place (`jobnetwork.py`), squid's rules rendered into
its state folder (`infra/squid.py`), then squid itself in the foreground, on the network's gateway, in place of the
command (so its unit supervises squid and a signal reaches it). Run as root: the firewall rules need it, and squid
drops to Debian's `proxy` user once it has its port.
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pi_dispatch.core.egress import (
    ALLOWLIST_FILE,
    ALLOWLIST_VARIABLE,
    DENIED_LOG,
    EGRESS_BRIDGE,
    EGRESS_NETWORK,
    PROXY_PORT,
    PROXY_STATE_DIR,
    Allowlist,
    parse_allowlist,
)
from pi_dispatch.core.errors import ConfigError, Problem
from pi_dispatch.infra.squid import ProxyPlace, squid_config
from pi_dispatch.worker.jobnetwork import (
    JobNetworkError,
    apply_rules,
    drop_rules,
    egress_rules_for,
    ensure_network,
    gateway_of,
    missing_rules,
    stale_proxy_rules,
)

STATE_DIR: Final = Path(PROXY_STATE_DIR)
SQUID_USER: Final = "proxy"  # Debian's squid runs as it
SQUID_CONF: Final = "squid.conf"
ANSWER_S: Final = 2.0  # how long a probe of the proxy's port waits for it to accept


@dataclass(frozen=True)
class EgressPlace:
    """Where the egress proxy lives on this host: its network and bridge, its port, its state folder."""

    network: str = EGRESS_NETWORK
    bridge: str = EGRESS_BRIDGE
    port: int = PROXY_PORT
    state_dir: Path = STATE_DIR
    reader_group: str | None = None  # the worker's group: it reads the refusal log (squid's user writes it)


def allowlist_path(declared: Path | str | None, env_file: Path | None) -> Path:
    """PI_EGRESS_ALLOWLIST_FILE, else egress-allowlist.conf beside the env file (or in the working folder)."""
    if declared:
        return Path(declared)
    return (env_file.parent if env_file is not None else Path.cwd()) / ALLOWLIST_FILE


def read_allowlist(path: Path) -> Allowlist:
    """The allowlist in `path`; raises ConfigError naming the file's variable, or each refused line."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) else "is not UTF-8 text"
        fix = "write one (pi-dispatch init --egress-allowlist PATH writes a starter), or set PI_EGRESS_ALLOWLIST_FILE"
        raise ConfigError([Problem(ALLOWLIST_VARIABLE, f"{path} cannot be read ({reason})", "egress", fix)]) from None
    return parse_allowlist(text, str(path))


def squid_binary() -> str:
    found = shutil.which("squid") or shutil.which("squid", path="/usr/sbin:/usr/bin")
    if found is None:
        raise JobNetworkError("no squid here: install Debian's (apt-get install squid)")
    return found


def prepare(client: Any, allowlist: Allowlist, place: EgressPlace) -> Path:
    """The network and its rules in place and squid's configuration written; returns the configuration's path."""
    ensure_network(client, place.network, place.bridge, internal=True)
    gateway = gateway_of(client, place.network)
    drop_rules(stale_proxy_rules(place.bridge, gateway))  # the network was made again on another subnet
    apply_rules(egress_rules_for(place.bridge, gateway, place.port))
    place.state_dir.mkdir(mode=0o750, parents=True, exist_ok=True)
    user = _squid_user()
    if user is not None and os.geteuid() == 0:
        _hand_over(place, user)
    where = ProxyPlace(gateway, place.state_dir, place.port, user=user.pw_name if user is not None else None)
    conf = place.state_dir / SQUID_CONF
    conf.write_text(squid_config(allowlist, where), encoding="utf-8")
    conf.chmod(0o644)
    return conf


def run_squid(conf: Path) -> None:
    """squid in the foreground with `conf`, in place of this process (never returns)."""
    binary = squid_binary()
    os.execv(binary, [binary, "-N", "-f", str(conf)])  # noqa: S606 - a fixed binary and arguments, no shell


def missing(client: Any, place: EgressPlace) -> list[str]:
    """What is not in place for the jobs' egress, in words (empty: the network, its rules and the proxy are up)."""
    from docker.errors import NotFound

    try:
        client.networks.get(place.network)
    except NotFound:
        return [f"the Docker network {place.network}"]
    gateway = gateway_of(client, place.network)
    rules = egress_rules_for(place.bridge, gateway, place.port)
    found = [f"rule: {rule.shown()}" for rule in missing_rules(rules)]
    if not answers(gateway, place.port):
        found.append(f"the proxy on {gateway}:{place.port}")
    return found


def answers(address: str, port: int) -> bool:
    """Whether something accepts a connection at address:port within ANSWER_S."""
    try:
        with socket.create_connection((address, port), timeout=ANSWER_S):
            return True
    except OSError:
        return False


def _hand_over(place: EgressPlace, user: pwd.struct_passwd) -> None:
    """The state folder and the refusal log to squid's user (it writes them), readable by the worker's group."""
    gid = user.pw_gid
    if place.reader_group is not None:
        try:
            gid = grp.getgrnam(place.reader_group).gr_gid
        except KeyError:
            raise JobNetworkError(f"no group {place.reader_group}: name the worker's group with --log-group") from None
    log = place.state_dir / DENIED_LOG
    log.touch(mode=0o640, exist_ok=True)
    for path, mode in ((place.state_dir, 0o750), (log, 0o640)):
        os.chown(path, user.pw_uid, gid)
        path.chmod(mode)


def _squid_user() -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam(SQUID_USER)
    except KeyError:
        return None
