"""The egress proxy's rules: a squid configuration rendered from an allowlist (`core/egress.py`).

Debian's squid, as the reference runs it, with the rules measured on these machines (docs/multi-host.md):
- names are matched as written (`dstdomain -n -n`): an IP literal reaches nothing unless it is itself listed, and an
  unlisted name is never resolved, since the name is checked before the address it resolves to;
- a listed name that resolves to loopback, RFC 1918, CGNAT, link-local or another non-public address is refused, so
  a name in the list cannot be pointed at the host or the LAN;
- a tunnel (`CONNECT`) reaches only the port its entry lists (443 for a bare name);
- a plain request reaches only a listed name on port 80, so a plain `https://` forward is refused too;
- nothing is cached, nothing about the job is forwarded (no `Via`, no `X-Forwarded-For`), squid names no version;
- every refusal is written to `denied.log` in its state folder, one line each (`core/egress.parse_denied`): when,
  from which job address, the method, the host and the port, never a path or a query (they could carry what a
  job was told to send out); nothing it allows is logged.
Names resolve with the host's own resolver: `/etc/hosts` (or `hosts_file`), then its DNS, so a site can pin one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from pi_dispatch.core.egress import DENIED_LOG, PLAIN_PORT, PROXY_PORT, Allowlist

# Where no job may be sent by name: the address ranges that are not the public internet.
NON_PUBLIC: Final = (
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "224.0.0.0/4",
    "240.0.0.0/4",
    "::/128",
    "::1",
    "64:ff9b::/96",
    "64:ff9b:1::/48",
    "100::/64",
    "2001::/23",
    "2001:db8::/32",
    "2002::/16",
    "3fff::/20",
    "5f00::/16",
    "fc00::/7",
    "fe80::/10",
    "fec0::/10",
    "ff00::/8",
)
# IPv6 as IANA's special-purpose registry has it (NAT64 and 6to4 carry an IPv4 address inside, so they could reach
# a private one). Not `::ffff:0:0/96`: squid reads it as covering every IPv4 address, which refuses everything.
HEADER: Final = "# Rendered by pi-dispatch: the egress proxy of this host's jobs. A rollout overwrites edits."
# when (epoch seconds.ms), the job's address, the method, the host and port asked for (no path, no query)
DENIED_FORMAT: Final = "%ts.%03tu %>a %rm %>rd %>rP"


@dataclass(frozen=True)
class ProxyPlace:
    """Where the proxy listens and keeps its state; `hosts_file` None: the host's own /etc/hosts."""

    listen: str  # an address of this host the jobs' networks reach
    state_dir: Path
    port: int = PROXY_PORT
    hosts_file: Path | None = None
    user: str | None = None  # the user squid drops to when started as root (Debian's: proxy)


@dataclass(frozen=True)
class Listener:
    """One more network's port on the proxy (a profile's, `core/egressprofiles.py`): its address and its list."""

    listen: str
    allowlist: Allowlist


def squid_config(allowlist: Allowlist, place: ProxyPlace, others: Sequence[Listener] = ()) -> str:
    """The whole squid.conf: `allowlist` on place.listen, each other listener's list on its own address (a request
    is judged by the list of the port it came in on), rules first-match in the order the module docstring gives."""
    listeners = [Listener(place.listen, allowlist), *others]
    lines = [HEADER, *(f"http_port {one.listen}:{place.port} name=in{i}" for i, one in enumerate(listeners))]
    lines += _process(place)
    lines += ["acl CONNECT method CONNECT", f"acl plain_port port {PLAIN_PORT}"]
    lines.append("acl non_public dst " + " ".join(NON_PUBLIC))
    ports = sorted({port for one in listeners for port in one.allowlist.ports})
    lines += [f"acl port_{port} port {port}" for port in ports]
    for i, one in enumerate(listeners):
        lines += _listener_rules(f"in{i}", one.allowlist)
    lines.append("http_access deny all")
    return "\n".join(lines) + "\n"


def _listener_rules(tag: str, allowlist: Allowlist) -> list[str]:
    lines = [f"acl {tag} myportname {tag}"]
    every = sorted({destination.written for destination in allowlist.destinations})
    if every:
        lines.append(f"acl {tag}_listed dstdomain -n " + " ".join(every))
    for port in allowlist.ports:
        names = sorted({destination.written for destination in allowlist.on_port(port)})
        lines.append(f"acl {tag}_listed_{port} dstdomain -n " + " ".join(names))
    # a name is checked before it is resolved: `non_public` (which resolves) comes last on each line
    lines += [
        f"http_access allow {tag} CONNECT port_{port} {tag}_listed_{port} !non_public" for port in allowlist.ports
    ]
    if every:
        lines.append(f"http_access allow {tag} !CONNECT plain_port {tag}_listed !non_public")
    return lines


def _process(place: ProxyPlace) -> list[str]:
    state = place.state_dir
    lines = [
        f"pid_filename {state / 'squid.pid'}",
        f"cache_log {state / 'cache.log'}",
        f"logformat denied {DENIED_FORMAT}",
        "acl refused http_status 403",
        f"access_log stdio:{state / DENIED_LOG} logformat=denied refused",
        "cache deny all",
        "cache_mem 8 MB",
        f"coredump_dir {state}",
        "via off",
        "forwarded_for delete",
        "httpd_suppress_version_string on",
        "visible_hostname egress-proxy",  # its pages and headers name no host
        "reply_header_access X-Cache deny all",
        "reply_header_access X-Cache-Lookup deny all",
        "shutdown_lifetime 1 seconds",
        "logfile_rotate 0",
    ]
    if place.hosts_file is not None:
        lines.append(f"hosts_file {place.hosts_file}")
    if place.user is not None:
        lines.append(f"cache_effective_user {place.user}")
    return lines
