"""The receiver's settings, each declared once, with the reference's own variable names and defaults.

Read like the worker's (`settings.DeclaredSettings`): the environment, or an env file alone; checked against
`schemas/receiver-env.schema.json`, generated from this declaration. `ReceiverSettings` declares what every
receiver reads; each forge's variables are declared in its entry (`core/forges.py`) and added to it as
`RECEIVER_MODEL`, which loads them; a forge's package reads its own (`receiver/forges/spec.forge_setting`).
A forge variable left empty counts as unset; the port, bind address, Valkey URL and triggers path take their
default only when absent. Which forges are armed, and what each then requires, is each forge package's business.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Final

from pydantic import field_validator

from pi_dispatch.config.declaration import setting
from pi_dispatch.config.envfile import render_env
from pi_dispatch.config.forgevars import MULTILINE_VARIABLES, with_forge_variables
from pi_dispatch.config.forms import TextForm
from pi_dispatch.config.kinds import (
    HOST_PORT,
    Whole,
    WholeMs,
    matching,
)
from pi_dispatch.config.store_settings import StoreSettings
from pi_dispatch.core.descriptors import descriptors_needed
from pi_dispatch.core.errors import ConfigError, Problem
from pi_dispatch.core.forges import FORGES

IDENTITY_RETRY_FLOOR_S: Final = 60

_PATH = TextForm(pattern=r"[^\x00-\x1f\x7f]+", what="a file path")
_BIND = TextForm(pattern=r"[A-Za-z0-9.:%_\[\]-]{1,255}", what="a listen address such as 0.0.0.0 or 127.0.0.1")
_ADDRESS = TextForm(
    pattern=HOST_PORT,
    what="host:port, such as 127.0.0.1:9470",
    blank_is_default=True,
    nullable=True,
)

FilePath = Annotated[str, matching(_PATH), _PATH]
BindAddress = Annotated[str, matching(_BIND), _BIND]
Address = Annotated[str | None, matching(_ADDRESS), _ADDRESS]


class ReceiverSettings(StoreSettings):
    """The typed configuration the receiver runs with, in the order the env file lists it."""

    triggers_file: FilePath = setting(
        "PI_TRIGGERS_FILE",
        "./triggers.json",
        "The triggers file (relative to the working directory unless absolute); watched and reloaded live.",
        "a path such as /etc/pi-dispatch-triggers/triggers.json",
    )
    port: Whole = setting(
        "RECEIVER_PORT", 3000, "The webhook port.", "a whole number from 1 to 65535, digits only", ge=1, le=65_535
    )
    bind: BindAddress = setting(
        "RECEIVER_BIND",
        "127.0.0.1",  # not the reference's 0.0.0.0: reachable from elsewhere only when an operator says so
        "The webhook listen address: 127.0.0.1 (the default) behind a reverse proxy on the same host, 0.0.0.0 to "
        "take deliveries directly.",
        "an address such as 127.0.0.1 or 0.0.0.0",
    )
    header_timeout_ms: WholeMs = setting(
        "PI_RECEIVER_HEADER_TIMEOUT_MS",
        10_000,
        "How long a connection may take to send a request's headers (and stay idle between requests) before it is "
        "closed, as nginx's client_header_timeout.",
        "a whole number of milliseconds from 1000 to 600000",
        ge=1_000,
        le=600_000,
    )
    body_timeout_ms: WholeMs = setting(
        "PI_RECEIVER_BODY_TIMEOUT_MS",
        10_000,
        "How long a request's body may take to arrive once its headers have: then 408 and the connection closed.",
        "a whole number of milliseconds from 1000 to 600000",
        ge=1_000,
        le=600_000,
    )
    max_connections: Whole = setting(
        "PI_RECEIVER_MAX_CONNECTIONS",
        1_024,
        "Connections held open at once, in all; one more is answered 503 and closed. The unit's LimitNOFILE is "
        "sized from it.",
        "a whole number from 16 to 65536",
        ge=16,
        le=65_536,
    )
    max_connections_per_peer: Whole = setting(
        "PI_RECEIVER_MAX_CONNECTIONS_PER_PEER",
        64,
        "Connections held open at once from one address; one more is answered 503 and closed. Behind a reverse "
        "proxy every connection comes from the proxy: set it to PI_RECEIVER_MAX_CONNECTIONS and cap peers there.",
        "a whole number from 1 to 65536",
        ge=1,
        le=65_536,
    )
    spool_dir: FilePath = setting(
        "PI_RECEIVER_SPOOL_DIR",
        "spool",
        "Where a verified delivery the store cannot take is kept (fsynced) until the store is back, relative to the "
        "working directory unless absolute; created at boot, private to the receiver.",
        "a path such as /var/lib/pi-dispatch-receiver/spool",
    )
    spool_max_mb: Whole = setting(
        "PI_RECEIVER_SPOOL_MAX_MB",
        64,
        "How much the spool may hold, in MiB; past it a delivery is answered 503. 0: no spool (503 whenever the "
        "store refuses).",
        "a whole number from 0 to 65536",
        ge=0,
        le=65_536,
    )
    health_addr: Address = setting(
        "PI_RECEIVER_HEALTH_ADDR",
        None,
        "host:port of the liveness and metrics endpoint (GET /livez, /readyz, /metrics), kept off the webhook port. "
        "Empty: none.",
        "host:port such as 127.0.0.1:9470, or empty for none",
    )
    identity_retry_seconds: Whole = setting(
        "RECEIVER_IDENTITY_RETRY_SECONDS",
        600,
        f"How long boot keeps retrying a forge identity that does not answer; raised to at least "
        f"{IDENTITY_RETRY_FLOOR_S}.",
        "a whole number of seconds, 1 or more",
        ge=1,
        le=86_400,
    )

    @field_validator("identity_retry_seconds")
    @classmethod
    def _at_least_the_retry_floor(cls, value: int) -> int:
        return max(IDENTITY_RETRY_FLOOR_S, value)


RECEIVER_MODEL: Final = with_forge_variables(ReceiverSettings, "ReceiverSettings", worker_only=False)
# The inventory variables each written under the variable a setting names (GITHUB_PAT under GITHUB_PAT_VAR's).
_HELD_UNDER: Final = {
    variable.names_the_variable_of: variable
    for words in FORGES.values()
    for variable in words.variables
    if variable.names_the_variable_of is not None
}
_MULTILINE: Final = frozenset(name.lower() for name in MULTILINE_VARIABLES)


RECEIVER_PREFIX: Final = "pi_dispatch_receiver_"
ROLE_VARS: Final = frozenset(
    {"package", "user", "home", "venv", "env_file", "triggers_source", "triggers_dir"}
    | {"service_state", "service_enabled"}
    | set(_HELD_UNDER)
)


def receiver_env_values(host_vars: Mapping[str, object], triggers_file: str) -> dict[str, str]:
    """The env file's variables from a host's `pi_dispatch_receiver_*` declarations (field names, lower-cased),
    the deployed triggers path, and each variable held under the one a setting names (the PAT under the variable
    GITHUB_PAT_VAR names). Raises ConfigError naming a variable the receiver does not read, which is almost always
    a typo."""
    fields = RECEIVER_MODEL.model_fields
    values: dict[str, str] = {}
    unknown = []
    for name, value in host_vars.items():
        field = name.removeprefix(RECEIVER_PREFIX)
        if not name.startswith(RECEIVER_PREFIX) or field in ROLE_VARS or value is None:
            continue
        if field not in fields or field == "triggers_file":
            unknown.append(name)
            continue
        text = str(value) if not isinstance(value, bool) else str(int(value))
        values[str(fields[field].validation_alias)] = text.replace("\n", "\\n") if field in _MULTILINE else text
    if unknown:
        raise ConfigError(
            [
                Problem(name, "is not a receiver setting", "inventory", "see schemas/receiver-env.schema.json")
                for name in unknown
            ]
        )
    for held, naming in _HELD_UNDER.items():
        if (secret := host_vars.get(RECEIVER_PREFIX + held)) is not None:
            values[str(host_vars.get(RECEIVER_PREFIX + naming.name.lower()) or naming.default)] = str(secret)
    return {"PI_TRIGGERS_FILE": triggers_file, **values}


def unit_descriptor_limit(declared: object) -> int:
    """The unit's LimitNOFILE for a host's declared `pi_dispatch_receiver_max_connections` (None: the default), what
    its connection cap needs; the env file's rendering refuses a cap that is not a whole number in range first."""
    default = ReceiverSettings.model_fields["max_connections"].default
    return descriptors_needed(int(str(declared)) if declared is not None else int(default))


def render_receiver_env(host_vars: Mapping[str, object], host: str, triggers_file: str) -> str:
    header = f"Rendered by pi-dispatch from the inventory for the receiver on {host}; a rollout overwrites edits."
    return render_env(receiver_env_values(host_vars, triggers_file), header)
