"""The receiver's settings, each declared once, with the reference's own variable names and defaults.

Read like the worker's (`settings.DeclaredSettings`): the environment, or an env file alone; checked against
`schemas/receiver-env.schema.json`, generated from this declaration. A forge variable left empty counts as
unset; the port, bind address, Valkey URL and triggers path take their default only when absent. Which forges
are armed, and what each then requires, is `receiver/endpoints.py`'s business.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Final

from pydantic import SecretStr, field_validator

from pi_dispatch.config.declaration import DeclaredSettings, setting
from pi_dispatch.config.envfile import render_env
from pi_dispatch.config.forms import TextForm
from pi_dispatch.config.kinds import (
    HOST_PORT,
    PRIMARY_NAME_HELP,
    SENTINEL_PASSWORD_HELP,
    SENTINELS_HELP,
    Password,
    PrimaryName,
    Sentinels,
    ValkeyUrl,
    Whole,
    WholeMs,
    matching,
)
from pi_dispatch.core.descriptors import descriptors_needed
from pi_dispatch.core.errors import ConfigError, Problem
from pi_dispatch.infra.store import DEFAULT_PRIMARY_NAME
from pi_dispatch.infra.valkey import DEFAULT_VALKEY_URL

IDENTITY_RETRY_FLOOR_S: Final = 60
DEFAULT_GITHUB_API: Final = "https://api.github.com"
DEFAULT_GITLAB_URL: Final = "https://gitlab.com"

_PATH = TextForm(pattern=r"[^\x00-\x1f\x7f]+", what="a file path")
_BIND = TextForm(pattern=r"[A-Za-z0-9.:%_\[\]-]{1,255}", what="a listen address such as 0.0.0.0 or 127.0.0.1")
_ADDRESS = TextForm(
    pattern=HOST_PORT,
    what="host:port, such as 127.0.0.1:9470",
    blank_is_default=True,
    nullable=True,
)
_URL = TextForm(  # blanks around it are trimmed, as the reference trims these
    pattern=r"[ \t]*https?://[^\x00-\x20\x7f]+[ \t]*",
    what="an http:// or https:// URL",
    blank_is_default=True,
    nullable=True,
)
_ID = TextForm(pattern=r"[1-9][0-9]{0,18}", what="a positive whole number", blank_is_default=True, nullable=True)
_SOURCE = TextForm(pattern=r"pat|gh|app", what="pat, gh or app", blank_is_default=True, nullable=True)
_GITLAB_MODE = TextForm(pattern=r"signature|token", what="signature or token", blank_is_default=True, nullable=True)
_AZURE_MODE = TextForm(pattern=r"basic|header", what="basic or header", blank_is_default=True, nullable=True)
_HEADER = TextForm(
    pattern=r"[ \t]*[!#$%&'*+.^_`|~0-9A-Za-z-]+[ \t]*", what="an HTTP header name", blank_is_default=True, nullable=True
)
_VARIABLE = TextForm(pattern=r"[A-Za-z_][A-Za-z0-9_]{0,127}", what="an environment variable name")
_KEY_PATH = TextForm(pattern=r"/[^\x00-\x1f\x7f]*", what="an absolute path", blank_is_default=True, nullable=True)
_PEM = TextForm(pattern=r"[^\x00]*", what="a PEM private key", blank_is_default=True, secret=True)

FilePath = Annotated[str, matching(_PATH), _PATH]
BindAddress = Annotated[str, matching(_BIND), _BIND]
Address = Annotated[str | None, matching(_ADDRESS), _ADDRESS]
HttpUrl = Annotated[str | None, matching(_URL), _URL]
NumericId = Annotated[str | None, matching(_ID), _ID]
AuthSource = Annotated[str | None, matching(_SOURCE), _SOURCE]
GitLabMode = Annotated[str | None, matching(_GITLAB_MODE), _GITLAB_MODE]
AzureMode = Annotated[str | None, matching(_AZURE_MODE), _AZURE_MODE]
HeaderName = Annotated[str | None, matching(_HEADER), _HEADER]
VariableName = Annotated[str, matching(_VARIABLE), _VARIABLE]
KeyPath = Annotated[str | None, matching(_KEY_PATH), _KEY_PATH]
PrivateKey = Annotated[SecretStr | None, matching(_PEM), _PEM]

SECRET_FIX: Final = "one line with no control characters; keep it in a vault and the env file 0600"  # noqa: S105 - advice


class ReceiverSettings(DeclaredSettings):
    """The typed configuration the receiver runs with, in the order the env file lists it."""

    triggers_file: FilePath = setting(
        "PI_TRIGGERS_FILE",
        "./triggers.json",
        "The triggers file (relative to the working directory unless absolute); watched and reloaded live.",
        "a path such as /etc/pi-dispatch-triggers/triggers.json",
    )
    valkey_url: ValkeyUrl = setting(
        "VALKEY_URL",
        DEFAULT_VALKEY_URL,
        "The shared Valkey the jobs are queued on and the registry read from.",
        "a URL such as redis://store.lan:6379/0, rediss://store.lan:6380 or unix:///run/valkey/valkey.sock",
    )
    valkey_password: Password = setting(
        "VALKEY_PASSWORD", None, "Valkey password, kept out of the URL. A password inside the URL wins.", SECRET_FIX
    )
    valkey_sentinels: Sentinels = setting("VALKEY_SENTINELS", "", *SENTINELS_HELP)
    valkey_primary_name: PrimaryName = setting("VALKEY_PRIMARY_NAME", DEFAULT_PRIMARY_NAME, *PRIMARY_NAME_HELP)
    valkey_sentinel_password: Password = setting("VALKEY_SENTINEL_PASSWORD", None, *SENTINEL_PASSWORD_HELP)
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
    webhook_secret: Password = setting(
        "WEBHOOK_SECRET", None, "GitHub's webhook secret (HMAC-SHA256); required when GitHub is served.", SECRET_FIX
    )
    github_auth_source: AuthSource = setting(
        "GITHUB_AUTH_SOURCE",
        None,
        "Where the GitHub token comes from: pat, gh (the gh CLI's login, the default) or app. Set explicitly, it "
        "also serves GitHub when no GitHub trigger exists.",
        "pat, gh or app",
    )
    github_pat_var: VariableName = setting(
        "GITHUB_PAT_VAR", "GITHUB_PAT", "The variable that holds the token when the source is pat.", "a variable name"
    )
    github_api_url: HttpUrl = setting(
        "GITHUB_API_URL",
        DEFAULT_GITHUB_API,
        "GitHub's API base, no trailing slash; for GitHub Enterprise Server https://<host>/api/v3.",
        "a URL such as https://api.github.com or https://ghe.example.com/api/v3",
    )
    github_app_id: NumericId = setting("GITHUB_APP_ID", None, "The GitHub App's id (source app).", "digits")
    github_app_installation_id: NumericId = setting(
        "GITHUB_APP_INSTALLATION_ID", None, "The App's installation id (source app).", "digits"
    )
    github_app_private_key_path: KeyPath = setting(
        "GITHUB_APP_PRIVATE_KEY_PATH", None, "The App's private key file (source app).", "an absolute path"
    )
    github_app_private_key: PrivateKey = setting(
        "GITHUB_APP_PRIVATE_KEY",
        None,
        "The App's private key itself, instead of a file (newlines may be written as \\n).",
        "the PEM text",
    )
    gitlab_webhook_mode: GitLabMode = setting(
        "GITLAB_WEBHOOK_MODE", None, "How GitLab deliveries are checked: signature or token.", "signature or token"
    )
    gitlab_webhook_secret: Password = setting(
        "GITLAB_WEBHOOK_SECRET", None, "GitLab's signing token (whsec_...) or shared secret token.", SECRET_FIX
    )
    gitlab_token: Password = setting(
        "GITLAB_TOKEN", None, "GitLab API token (the harness identity and member lookups).", SECRET_FIX
    )
    gitlab_url: HttpUrl = setting(
        "GITLAB_URL", DEFAULT_GITLAB_URL, "The GitLab instance root.", "a URL such as https://gitlab.example.com"
    )
    forgejo_url: HttpUrl = setting("FORGEJO_URL", None, "The Forgejo instance root.", "a URL")
    forgejo_webhook_secret: Password = setting(
        "FORGEJO_WEBHOOK_SECRET", None, "Forgejo's webhook secret (HMAC-SHA256).", SECRET_FIX
    )
    forgejo_token: Password = setting("FORGEJO_TOKEN", None, "Forgejo API token.", SECRET_FIX)
    forgejo_bot_id: NumericId = setting(
        "FORGEJO_BOT_ID", None, "The harness's Forgejo user id; skips asking Forgejo at boot.", "digits"
    )
    azure_webhook_mode: AzureMode = setting(
        "AZURE_WEBHOOK_MODE", None, "How Azure DevOps deliveries are checked: basic or header.", "basic or header"
    )
    azure_webhook_header: HeaderName = setting(
        "AZURE_WEBHOOK_HEADER", None, "The header that carries the secret in header mode.", "a header name"
    )
    azure_webhook_secret: Password = setting(
        "AZURE_WEBHOOK_SECRET",
        None,
        "base64 of user:password (basic mode) or the header's value (header mode).",
        SECRET_FIX,
    )
    azure_org_url: HttpUrl = setting("AZURE_ORG_URL", None, "https://dev.azure.com/<organization>.", "a URL")
    azure_token: Password = setting(
        "AZURE_TOKEN", None, "Azure DevOps PAT (identity and Graph lookups; needs vso.graph).", SECRET_FIX
    )

    @field_validator("identity_retry_seconds")
    @classmethod
    def _at_least_the_retry_floor(cls, value: int) -> int:
        return max(IDENTITY_RETRY_FLOOR_S, value)


RECEIVER_PREFIX: Final = "pi_dispatch_receiver_"
ROLE_VARS: Final = frozenset(
    {"package", "user", "home", "venv", "env_file", "triggers_source", "triggers_dir", "github_pat"}
    | {"service_state", "service_enabled"}
)


def receiver_env_values(host_vars: Mapping[str, object], triggers_file: str) -> dict[str, str]:
    """The env file's variables from a host's `pi_dispatch_receiver_*` declarations (field names, lower-cased),
    the deployed triggers path, and the PAT under the variable GITHUB_PAT_VAR names. Raises ConfigError naming a
    variable the receiver does not read, which is almost always a typo."""
    fields = ReceiverSettings.model_fields
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
        values[str(fields[field].validation_alias)] = (
            text.replace("\n", "\\n") if field == "github_app_private_key" else text
        )
    if unknown:
        raise ConfigError(
            [
                Problem(name, "is not a receiver setting", "inventory", "see schemas/receiver-env.schema.json")
                for name in unknown
            ]
        )
    pat = host_vars.get(RECEIVER_PREFIX + "github_pat")
    if pat is not None:
        values[str(host_vars.get(RECEIVER_PREFIX + "github_pat_var") or "GITHUB_PAT")] = str(pat)
    return {"PI_TRIGGERS_FILE": triggers_file, **values}


def unit_descriptor_limit(declared: object) -> int:
    """The unit's LimitNOFILE for a host's declared `pi_dispatch_receiver_max_connections` (None: the default), what
    its connection cap needs; the env file's rendering refuses a cap that is not a whole number in range first."""
    default = ReceiverSettings.model_fields["max_connections"].default
    return descriptors_needed(int(str(declared)) if declared is not None else int(default))


def render_receiver_env(host_vars: Mapping[str, object], host: str, triggers_file: str) -> str:
    header = f"Rendered by pi-dispatch from the inventory for the receiver on {host}; a rollout overwrites edits."
    return render_env(receiver_env_values(host_vars, triggers_file), header)
