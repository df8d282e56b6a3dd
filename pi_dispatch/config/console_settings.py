"""The web console's settings (`pi-dispatch console`), each declared once: the store it reads, where it listens, who
may log in and with which role, and whether operators may act from it. Read like the receiver's, from the
environment or an env file alone (0600: it holds the logins' token hashes); `schemas/console-env.schema.json` is
generated from this declaration.

A login is `name:role:sha256`, where the hash is SHA-256 of the login's token as 64 lowercase hex (`printf %s
"$TOKEN" | sha256sum`); the token itself is never written anywhere. Roles: `read` (every page) and `operate` (the
actions too, once PI_CONSOLE_ACTIONS=1). With no login declared, the console asks for none and is read-only.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Final

from pi_dispatch.config.declaration import load_declared, setting
from pi_dispatch.config.envfile import render_env
from pi_dispatch.config.forms import TextForm
from pi_dispatch.config.kinds import (
    Flag,
    HostFile,
    Whole,
    form_of,
    matching,
)
from pi_dispatch.config.store_settings import StoreSettings
from pi_dispatch.core.errors import ConfigError, Problem

ROLES: Final = ("read", "operate")
LOGIN: Final = r"[a-z][a-z0-9_.-]{0,31}:(?:read|operate):[0-9a-f]{64}"
_LOGINS = TextForm(
    pattern=f"|{LOGIN}(?:,{LOGIN}){{0,63}}", what="name:role:sha256 entries separated by commas", secret=True
)
_BIND = TextForm(pattern=r"[A-Za-z0-9.:%_\[\]-]{1,255}", what="a listen address such as 127.0.0.1")
_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
_HOSTS = TextForm(pattern=f"|{_NAME}(?:,{_NAME}){{0,31}}", what="host names separated by commas, or empty")
_PROXY = TextForm(pattern=r"|[0-9A-Fa-f.:]{2,45}", what="an IP address, or empty")
Logins = Annotated[str, matching(_LOGINS), _LOGINS]
HostNames = Annotated[str, matching(_HOSTS), _HOSTS]
ProxyAddress = Annotated[str, matching(_PROXY), _PROXY]
BindAddress = Annotated[str, matching(_BIND), _BIND]


@dataclass(frozen=True)
class Login:
    name: str
    role: str
    token_sha256: str


def parse_logins(text: str) -> tuple[Login, ...]:
    """The declared logins (the setting's pattern has checked them)."""
    found = []
    for entry in filter(None, text.split(",")):
        name, role, digest = entry.split(":")
        found.append(Login(name, role, digest))
    return tuple(found)


class ConsoleSettings(StoreSettings):
    """The typed configuration the console runs with, in the order the env file lists it."""

    bind: BindAddress = setting(
        "PI_CONSOLE_BIND",
        "127.0.0.1",
        "The console's listen address: 127.0.0.1 (the default) for this host or a TLS proxy in front of it.",
        "an address such as 127.0.0.1 or 0.0.0.0",
    )
    hosts: HostNames = setting(
        "PI_CONSOLE_HOSTS",
        "",
        "Names a browser reaches the console by (a TLS proxy's), besides localhost and any IP address: a request "
        "whose Host is another name is answered 421, so a web page cannot read the console through a name of its own "
        "pointed at this host (DNS rebinding).",
        "host names separated by commas, such as console.example.org; or empty",
    )
    trusted_proxy: ProxyAddress = setting(
        "PI_CONSOLE_TRUSTED_PROXY",
        "",
        "The address of the proxy in front of the console: for its requests, the last X-Forwarded-For address is the "
        "client whose failed logins are counted (each address is slowed on its own). Empty: the connection's own.",
        "an IP address such as 127.0.0.1; or empty",
    )
    port: Whole = setting(
        "PI_CONSOLE_PORT", 10480, "The console's port.", "a whole number from 1 to 65535", ge=1, le=65_535
    )
    logins: Logins = setting(
        "PI_CONSOLE_LOGINS",
        "",
        "Who may log in: name:role:sha256 entries separated by commas, the hash being SHA-256 of the login's token "
        '(printf %s "$TOKEN" | sha256sum); role read (every page) or operate (the actions too). Empty: no login '
        "is asked for and the console is read-only.",
        "entries such as alice:operate:<64 hex>, separated by commas; or empty",
    )
    actions: Flag = setting(
        "PI_CONSOLE_ACTIONS",
        False,
        "1: a login of role operate may cancel, retry, drain and resume from the console (each asks to confirm, and "
        "is written to the fleet's trail). 0: read-only for everyone.",
        "1 or 0",
    )
    tls: Flag = setting(
        "PI_CONSOLE_TLS",
        False,
        "1: the console is reached through a TLS proxy, and its session cookie is marked Secure.",
        "1 or 0",
    )
    inventory: HostFile = setting(
        "PI_CONSOLE_INVENTORY",
        None,
        "The fleet's Ansible inventory (a file or folder on this host): its audit page shows `pi-dispatch audit "
        "--live` of it (the controller extra installed beside the console's). Unset: no audit page.",
        "a path such as /etc/pi-dispatch/inventory; or unset",
    )

    @property
    def declared_logins(self) -> tuple[Login, ...]:
        return parse_logins(self.logins)

    @property
    def served_names(self) -> frozenset[str]:
        """The host names (lower case) a request's Host may give, beyond localhost and IP addresses."""
        return frozenset(name.lower() for name in self.hosts.split(",") if name)

    def exposure_problems(self, bind: str, source: str) -> list[Problem]:
        """Why listening on `bind` would show the fleet to whoever reaches it: beyond loopback with no login."""
        if is_loopback(bind) or self.declared_logins:
            return []
        return [
            Problem(
                "PI_CONSOLE_BIND",
                f"is {bind}, beyond this host, and no login is declared: anyone who reaches it reads the fleet",
                source,
                "bind 127.0.0.1 (the default) and reach it through an SSH tunnel, or declare PI_CONSOLE_LOGINS and "
                "put a TLS proxy in front (PI_CONSOLE_TLS=1)",
            )
        ]


def is_loopback(bind: str) -> bool:
    """Whether an address is this host's alone: localhost, 127.0.0.0/8 or ::1."""
    try:
        return ipaddress.ip_address(bind.strip("[]")).is_loopback
    except ValueError:
        return bind.lower() == "localhost"


def load_console_settings(env_file: Path | None = None) -> ConsoleSettings:
    """The console's settings from the process environment, or from env_file alone. Raises ConfigError."""
    settings, _ = load_declared(ConsoleSettings, "console-env", env_file)
    return settings


CONSOLE_PREFIX: Final = "pi_dispatch_console_"
ROLE_VARS: Final = frozenset({"package", "user", "home", "venv", "env_file", "service_state", "service_enabled"})


def render_console_env(host_vars: Mapping[str, object], host: str) -> str:
    """The env file from a host's `pi_dispatch_console_*` declarations (field names, lower-cased). Raises
    ConfigError naming a variable the console does not read (almost always a typo)."""
    fields = ConsoleSettings.model_fields
    values: dict[str, str] = {}
    unknown = []
    for name, value in host_vars.items():
        field = name.removeprefix(CONSOLE_PREFIX)
        if not name.startswith(CONSOLE_PREFIX) or field in ROLE_VARS or value is None:
            continue
        if field not in fields:
            unknown.append(name)
            continue
        values[str(fields[field].validation_alias)] = form_of(fields[field]).env_text(value)
    if unknown:
        raise ConfigError(
            [
                Problem(name, "is not a console setting", "inventory", "see schemas/console-env.schema.json")
                for name in unknown
            ]
        )
    header = f"Rendered by pi-dispatch from the inventory for the console on {host}; a rollout overwrites edits."
    return render_env(values, header)
