"""Egress: the switch (`PI_EGRESS`) and the allowlist grammar, as the reference reads them. Pure.

The reference's `egress-allowlist.conf` is a squid `dstdomain` file: one name per line, a leading dot for a domain
and its subdomains (`.github.com`), comments on lines of their own. One file serves a Node and a Python host. Ours
adds `name:port` (a tunnel to a port other than 443), for the per-profile lists the inventory renders; a reference
file has none, so it reads the same here. What the file may not say is refused by line: a bare or embedded
wildcard (`*`, `.`), a comment after an entry (squid's reading of it is not known), a port out of range, a name
that is not one.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from pi_dispatch.core.errors import ConfigError, Problem

ALLOWLIST_VARIABLE: Final = "PI_EGRESS_ALLOWLIST_FILE"
ALLOWLIST_FILE: Final = "egress-allowlist.conf"  # beside the worker's env file, as the reference keeps it
PROXY_PORT: Final = 3128  # the reference's EGRESS_PROXY_PORT
EGRESS_NETWORK: Final = "pi-egress"  # the network egress jobs join, where the proxy listens on the gateway
EGRESS_BRIDGE: Final = "pi-egress0"  # its bridge interface, which the firewall rules name
PROXY_STATE_DIR: Final = "/run/pi-dispatch-egress"  # squid's rules, pid and refusal log, unless PI_EGRESS_STATE_DIR
DENIED_LOG: Final = "denied.log"  # in it: one line per refusal (`infra/squid.DENIED_FORMAT`), which the worker reads
# What a job is told of its proxy: both spellings (curl reads only the lowercase http_proxy, others the upper),
# and Node's switch without which its fetch ignores them.
PROXY_VARIABLES: Final = (
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "https_proxy",
    "http_proxy",
    "NO_PROXY",
    "no_proxy",
    "NODE_USE_ENV_PROXY",
)
TLS_PORT: Final = 443  # what a bare name's tunnel may reach
PLAIN_PORT: Final = 80  # what a plain (unencrypted) request to a listed name may reach
_LABEL: Final = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
_WRITTEN: Final = re.compile(r"(?P<host>\[[0-9a-fA-F:.]+\]|[^:\s]+)(?::(?P<port>[0-9]{1,5}))?")
# What `pi-dispatch init --egress-allowlist` writes: the model provider the agent talks to and the forge it works on.
STARTER_ALLOWLIST: Final = """\
# Where this host's jobs may connect once egress is on (pi-dispatch egress-proxy), in the reference's grammar:
# one name per line, a leading dot for a domain and its subdomains, name:port for a port other than 443.
# Comments on lines of their own. The proxy reads it when it starts: restart it after a change.
# the model provider the agent talks to
api.anthropic.com
# the forge: its API, git over HTTPS and its downloads (each by name: .githubusercontent.com would be a public
# suffix, under which anyone's content is served)
github.com
api.github.com
codeload.github.com
raw.githubusercontent.com
objects.githubusercontent.com
"""
ALLOWLIST_FIX: Final = (
    "one name per line (api.example.com), a leading dot for a domain and its subdomains (.example.com), optionally "
    ":port; comments on their own lines"
)


def egress_armed(raw: str | None) -> bool:
    """The reference's strict switch: unset, empty or `1` is on; exactly `0` is off; anything else raises
    ValueError (a config error at boot)."""
    if raw is None or raw in ("", "1"):
        return True
    if raw == "0":
        return False
    raise ValueError("must be exactly 0 (off) or 1 (on, as unset)")


@dataclass(frozen=True, order=True)
class Destination:
    """One allowed destination: a name (or an IP literal, matched as written), whether its subdomains count too,
    and the port a tunnel to it may reach."""

    host: str
    subdomains: bool = False
    port: int = TLS_PORT

    @property
    def literal(self) -> bool:
        return _is_address(self.host)

    @property
    def written(self) -> str:
        """As squid's `dstdomain` reads it: `.example.com` for a domain and its subdomains."""
        return ("." if self.subdomains else "") + self.host

    def covers(self, host: str) -> bool:
        """Whether a request naming `host` (as written in it) is to this destination's name."""
        name = host.lower().rstrip(".")
        return name == self.host or (self.subdomains and name.endswith("." + self.host))


@dataclass(frozen=True)
class Allowlist:
    """The destinations a job may reach, in file order, no duplicates."""

    destinations: tuple[Destination, ...] = ()

    @property
    def ports(self) -> tuple[int, ...]:
        return tuple(sorted({destination.port for destination in self.destinations}))

    def on_port(self, port: int) -> tuple[Destination, ...]:
        return tuple(destination for destination in self.destinations if destination.port == port)

    def allows(self, host: str, port: int) -> bool:
        """Whether a tunnel to host:port is listed (names as written; the proxy also refuses private addresses)."""
        return any(d.port == port and d.covers(host) for d in self.destinations)


def parse_allowlist(text: str, source: str) -> Allowlist:
    """The allowlist in `text`; raises ConfigError naming each refused line of `source` (never its value)."""
    found: list[Destination] = []
    problems: list[Problem] = []
    for number, line in enumerate(text.splitlines(), start=1):
        entry = line.strip()
        if not entry or entry.startswith("#"):
            continue
        try:
            destination = _destination(entry)
        except ValueError as refused:
            problems.append(Problem(f"line {number}", str(refused), source, ALLOWLIST_FIX))
            continue
        if destination not in found:
            found.append(destination)
    if problems:
        raise ConfigError(problems)
    return Allowlist(tuple(found))


def _destination(entry: str) -> Destination:
    if "#" in entry:
        raise ValueError("has a comment after its entry")
    if "*" in entry:
        raise ValueError("has a wildcard: write .example.com for a domain and its subdomains")
    if any(character.isspace() for character in entry):
        raise ValueError("holds more than one entry")
    written = _WRITTEN.fullmatch(entry)
    if written is None:
        raise ValueError("is not a name, an address or name:port")
    host, port = written["host"].lower(), int(written["port"]) if written["port"] else TLS_PORT
    if not 1 <= port <= 65_535:
        raise ValueError("has a port out of 1-65535")
    subdomains = host.startswith(".")
    host = host.removeprefix(".").rstrip(".") if not host.startswith("[") else host
    if _is_address(host):
        if subdomains:
            raise ValueError("puts a dot before an address")
        return Destination(host, False, port)
    labels = host.split(".")
    if len(labels) < 2 or not all(_LABEL.fullmatch(label) for label in labels) or labels[-1].isdigit():
        raise ValueError("is not a name of two labels or more (a bare top-level domain is a wildcard)")
    if len(host) > 253:
        raise ValueError("is a name over 253 characters")
    return Destination(host, subdomains, port)


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host.removeprefix("[").removesuffix("]"))
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class Denied:
    """One destination the proxy refused a job: when (epoch ms), from which address, the method, host and port."""

    at_ms: int
    client: str
    method: str
    host: str
    port: int


_DENIED: Final = re.compile(
    r"(?P<s>[0-9]{1,12})\.(?P<ms>[0-9]{3}) (?P<client>[0-9a-fA-F.:]{2,45}) (?P<method>[A-Z]{1,16}) "
    r"(?P<host>[A-Za-z0-9._:\[\]-]{1,255}) (?P<port>[0-9]{1,5})"
)


def parse_denied(line: str) -> Denied | None:
    """One line of the proxy's refusal log (`infra/squid.DENIED_FORMAT`); None for one that is not (a job chooses
    the host it asks for, so the line is read as hostile text: anything out of shape is left out)."""
    found = _DENIED.fullmatch(line.strip())
    if found is None or not 0 < int(found["port"]) <= 65_535 or not _is_address(found["client"]):
        return None
    at_ms = int(found["s"]) * 1000 + int(found["ms"])
    return Denied(at_ms, found["client"], found["method"], found["host"].lower(), int(found["port"]))


def proxy_environment(gateway: str, port: int = PROXY_PORT) -> dict[str, str]:
    """What an egress job's environment says of its proxy (the reference's variables, both spellings)."""
    url = f"http://{gateway}:{port}"
    values = (url, url, url, url, "localhost,127.0.0.1", "localhost,127.0.0.1", "1")
    return dict(zip(PROXY_VARIABLES, values, strict=True))


OFFLINE: Final = "offline"  # what the inventory may write for a profile's list of nothing (no network at all)


def allowlist_text(entries: list[str] | str, source: str) -> str:
    """The allowlist file of these entries (what the role writes from the inventory, `source` naming its variable),
    as the proxy will read it; `offline` is a list of none. Raises ConfigError naming each entry it refuses."""
    listed = [] if entries == OFFLINE else list(entries)
    said = " (offline: its jobs get no network)" if not listed else ""
    header = f"# Written from the inventory ({source}){said}; the egress proxy and the worker read it.\n"
    text = header + "".join(f"{entry}\n" for entry in listed)
    parse_allowlist(text, source)
    return text


def proxy_state_dir(declared: Path | str | None) -> Path:
    """The egress proxy's state folder: PI_EGRESS_STATE_DIR, else its own (`--state-dir` says otherwise)."""
    return Path(declared or PROXY_STATE_DIR)
