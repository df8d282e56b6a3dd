"""The egress proxy of this host's jobs, as `pi-dispatch egress-proxy` runs it: the allowlist read (the reference's
file, `core/egress.py`), the egress network and its rules in place (`jobnetwork.py`), squid's rules rendered into
its state folder (`infra/squid.py`), then squid itself in the foreground, on the network's gateway, in place of the
command (so its unit supervises squid and a signal reaches it). Run as root: the firewall rules need it, and squid
drops to Debian's `proxy` user once it has its port.
"""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import re
import shutil
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

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
from pi_dispatch.core.egressprofiles import NETWORK_PREFIX, EgressNetwork, EgressPlan
from pi_dispatch.core.errors import ConfigError, Problem
from pi_dispatch.core.profiles import VARIABLE
from pi_dispatch.infra.squid import Listener, ProxyPlace, squid_config
from pi_dispatch.worker.gates.jobnetwork import (
    EGRESS_LABEL,
    JobNetworkError,
    apply_rules,
    drop_rules,
    egress_rules_for,
    ensure_network,
    gateway_of,
    missing_rules,
    network_gateway,
    stale_proxy_rules,
)

if TYPE_CHECKING:
    from pi_dispatch.config.worker_settings import WorkerSettings

STATE_DIR: Final = Path(PROXY_STATE_DIR)
SQUID_USER: Final = "proxy"  # Debian's squid runs as it
SQUID_CONF: Final = "squid.conf"
ANSWER_S: Final = 2.0  # how long a probe of the proxy's port waits for it to accept
PROFILES_VARIABLE: Final = VARIABLE["egress"]
OWNER_LABEL: Final = "pi-dispatch.egress-owner"  # which proxy (by its state folder) made a profile's network
_PROFILE_NETWORK: Final = re.compile(re.escape(NETWORK_PREFIX) + "[0-9a-f]{8}")


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


def read_allowlist(path: Path, variable: str = ALLOWLIST_VARIABLE) -> Allowlist:
    """The allowlist in `path`; raises ConfigError naming the file's variable, or each refused line."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) else "is not UTF-8 text"
        fix = "write one (pi-dispatch init --egress-allowlist PATH writes a starter), or " + (
            "set PI_EGRESS_ALLOWLIST_FILE" if variable == ALLOWLIST_VARIABLE else f"correct {PROFILES_VARIABLE}"
        )
        raise ConfigError([Problem(variable, f"{path} cannot be read ({reason})", "egress", fix)]) from None
    return parse_allowlist(text, str(path))


def egress_plan(settings: WorkerSettings) -> EgressPlan:
    """This host's egress: its jobs' own network and each profile's list (PI_EGRESS_PROFILES' files, read now).
    Raises ConfigError for a list that cannot be read or is refused, and for a list of destinations no proxy
    would enforce (PI_EGRESS=0 or PI_JOB_NETWORK=none: its jobs would reach what the network reaches)."""
    lists = {
        name: read_allowlist(Path(path), f"{PROFILES_VARIABLE} entry {name!r}")
        for name, path in settings.egress_profiles.items()
    }
    unenforced = sorted(name for name, allowlist in lists.items() if allowlist.destinations)
    if settings.egress_network is None and unenforced:
        raise ConfigError(
            [
                Problem(
                    PROFILES_VARIABLE,
                    f"gives {', '.join(unenforced)} destinations to reach, and no egress proxy would enforce them "
                    "(PI_EGRESS=0 or PI_JOB_NETWORK=none)",
                    "egress",
                    "turn egress on (PI_EGRESS=1, PI_JOB_NETWORK empty), or give those profiles empty lists (offline)",
                )
            ]
        )
    return EgressPlan(settings.jobs_network, lists)


def squid_binary() -> str:
    found = shutil.which("squid") or shutil.which("squid", path="/usr/sbin:/usr/bin")
    if found is None:
        raise JobNetworkError("no squid here: install Debian's (apt-get install squid)")
    return found


def prepare(client: Any, allowlist: Allowlist, place: EgressPlace, profiles: Sequence[EgressNetwork] = ()) -> Path:
    """The host's network and each profile list's (`profiles`) with their rules in place, the networks of lists no
    longer declared gone, and squid's configuration written; returns the configuration's path."""
    gateway = _network_ready(client, place.network, place.bridge, place.port)
    owner = {OWNER_LABEL: owner_mark(place.state_dir)}
    others = [
        Listener(_network_ready(client, one.name, one.bridge, place.port, owner), one.allowlist) for one in profiles
    ]
    _retire(client, {one.name for one in profiles}, place.port, owner)
    place.state_dir.mkdir(mode=0o750, parents=True, exist_ok=True)
    user = _squid_user()
    if user is not None and os.geteuid() == 0:
        _hand_over(place, user)
    where = ProxyPlace(gateway, place.state_dir, place.port, user=user.pw_name if user is not None else None)
    conf = place.state_dir / SQUID_CONF
    conf.write_text(squid_config(allowlist, where, others), encoding="utf-8")
    conf.chmod(0o644)
    return conf


def _network_ready(client: Any, network: str, bridge: str, port: int, labels: dict[str, str] | None = None) -> str:
    """The internal network there with its rules; returns its gateway, where the proxy listens for it."""
    ensure_network(client, network, bridge, internal=True, labels=labels)
    gateway = gateway_of(client, network)
    drop_rules(stale_proxy_rules(bridge, gateway))  # the network was made again on another subnet
    apply_rules(egress_rules_for(bridge, gateway, port))
    return gateway


def owner_mark(state_dir: Path) -> str:
    """A proxy's mark on the profile networks it makes (its state folder's digest: another proxy on the same
    daemon, a demo's or a test's, has its own and leaves them be)."""
    return hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:12]


def _retire(client: Any, kept: set[str], port: int, owner: dict[str, str]) -> None:
    """This proxy's profile networks of lists no longer declared, and their rules, gone; one a container is still
    on stays (its job ends unable to go out, the proxy no longer listening there) until the proxy's next start."""
    from docker.errors import APIError

    ((label, value),) = owner.items()
    for network in client.networks.list(filters={"label": [EGRESS_LABEL, f"{label}={value}"]}):
        name = str(network.name)
        if not _PROFILE_NETWORK.fullmatch(name) or name in kept:
            continue
        bridge = str((network.attrs.get("Options") or {}).get("com.docker.network.bridge.name") or "")
        gateway = network_gateway(network.attrs)
        try:
            network.remove()
        except APIError:
            continue
        if bridge and gateway is not None:
            drop_rules(egress_rules_for(bridge, gateway, port))


def run_squid(conf: Path) -> None:
    """squid in the foreground with `conf`, in place of this process (never returns)."""
    binary = squid_binary()
    os.execv(binary, [binary, "-N", "-f", str(conf)])  # noqa: S606 - a fixed binary and arguments, no shell


def missing(client: Any, place: EgressPlace, profiles: Sequence[EgressNetwork] = ()) -> list[str]:
    """What is not in place for the jobs' egress, in words (empty: each network, its rules and the proxy are up)."""
    from docker.errors import NotFound

    found: list[str] = []
    for network, bridge in ((place.network, place.bridge), *((one.name, one.bridge) for one in profiles)):
        try:
            client.networks.get(network)
        except NotFound:
            found.append(f"the Docker network {network}")
            continue
        gateway = gateway_of(client, network)
        rules = egress_rules_for(bridge, gateway, place.port)
        found += [f"rule: {rule.shown()}" for rule in missing_rules(rules)]
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
