"""The worker role's own `pi_dispatch_worker_*` variables, declared once (`RoleVars`), and the form of every host
variable: a worker setting's (`WorkerSettings` says which variable is its) or one of the role's. The role's
variables share the prefix but never reach the env file; `hostvars.py` checks a host's declarations by these forms.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Final

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic.fields import FieldInfo

from pi_dispatch.config.declaration import ENV_ONLY
from pi_dispatch.config.forms import Bounds, FlagForm, Form, TextForm
from pi_dispatch.config.kinds import ABSOLUTE_PATH, X_FIX, X_HOST_VAR, extra, form_of, matching, refused
from pi_dispatch.config.patterns import schema_pattern
from pi_dispatch.config.worker_settings import WorkerSettings
from pi_dispatch.core.egress import OFFLINE, parse_allowlist
from pi_dispatch.core.errors import ConfigError
from pi_dispatch.core.names import HOST_VAR_PREFIX, PROFILE_NAME_RE
from pi_dispatch.core.pausewindows import PauseWindowsError, parse_pause_windows
from pi_dispatch.core.profiles import MAX_PROFILES
from pi_dispatch.core.providers import EVERY_KEY
from pi_dispatch.core.scopedlimits import ScopedLimitsError, parse_scoped_limits

PREFIX: Final = HOST_VAR_PREFIX


@dataclass(frozen=True, kw_only=True)
class AnyTextForm(Form):
    def noun(self, bounds: Bounds) -> str:
        return "text"

    def host_schema(self, bounds: Bounds) -> dict[str, Any]:
        return {"type": "string"}


@dataclass(frozen=True, kw_only=True)
class GidForm(Form):
    def host_types(self) -> tuple[type, ...]:
        return (int, str)

    def noun(self, bounds: Bounds) -> str:
        return "a gid, or empty"

    def host_schema(self, bounds: Bounds) -> dict[str, Any]:
        return {"anyOf": [{"type": "integer", "minimum": 1, "maximum": 2**31 - 1}, {"const": ""}]}


@dataclass(frozen=True, kw_only=True)
class ScriptsForm(Form):
    def host_types(self) -> tuple[type, ...]:
        return (dict,)

    def noun(self, bounds: Bounds) -> str:
        return "absolute destination paths mapped to source files"

    def host_schema(self, bounds: Bounds) -> dict[str, Any]:
        return {
            "type": "object",
            "additionalProperties": {"type": "string"},
            "propertyNames": {"pattern": schema_pattern(ABSOLUTE_PATH)},
        }


@dataclass(frozen=True, kw_only=True)
class ProviderKeysForm(Form):
    secret: bool = True

    def host_types(self) -> tuple[type, ...]:
        return (dict,)

    def noun(self, bounds: Bounds) -> str:
        return "pi's key variables mapped to their keys"

    def host_schema(self, bounds: Bounds) -> dict[str, Any]:
        names = sorted(EVERY_KEY)
        return {"type": "object", "additionalProperties": {"type": "string"}, "propertyNames": {"enum": names}}


@dataclass(frozen=True, kw_only=True)
class AllowlistForm(Form):
    def host_types(self) -> tuple[type, ...]:
        return (list,)

    def noun(self, bounds: Bounds) -> str:
        return "a list of allowlist entries"

    def host_schema(self, bounds: Bounds) -> dict[str, Any]:
        item = {"type": "string", "maxLength": 260, "pattern": schema_pattern(ALLOWLIST_ENTRY)}
        return {"type": "array", "items": item, "maxItems": 1024}


@dataclass(frozen=True, kw_only=True)
class ProfileListsForm(Form):
    def host_types(self) -> tuple[type, ...]:
        return (dict,)

    def noun(self, bounds: Bounds) -> str:
        return "profile names mapped to allowlists (or offline)"

    def host_schema(self, bounds: Bounds) -> dict[str, Any]:
        return {
            "type": "object",
            "maxProperties": MAX_PROFILES,
            "propertyNames": {"pattern": schema_pattern(PROFILE_NAME_RE.pattern)},
            "additionalProperties": {"anyOf": [AllowlistForm().host_schema(bounds), {"const": OFFLINE}]},
        }


def _profile_lists(value: object) -> object:
    """Each profile's list as the proxy reads it, `offline` for none; refused naming the profiles it refuses."""
    if isinstance(value, Mapping):
        for name, entries in value.items():
            if not isinstance(name, str) or PROFILE_NAME_RE.fullmatch(name) is None:
                raise refused(f"names a profile {name!r} that is not a profile name")
            if entries != OFFLINE and not isinstance(entries, list):
                raise refused(f"gives {name} neither a list nor {OFFLINE}")
            if entries != OFFLINE:
                _allowlist(entries)
    return value


def _allowlist(value: object) -> object:
    """Each entry as the egress proxy reads it (`core/egress.py`); refused naming the entries it refuses."""
    if isinstance(value, list):
        entries = [entry if isinstance(entry, str) else "" for entry in value]
        if any("\n" in entry for entry in entries):
            raise refused("holds an entry of more than one line")
        try:
            parse_allowlist("\n".join(entries), "the inventory")
        except ConfigError as error:
            raise refused(problems=error.problems) from None
    return value


def _provider_keys(value: object) -> object:
    if isinstance(value, Mapping) and not all(
        name in EVERY_KEY and isinstance(key, str) for name, key in value.items()
    ):
        raise refused()
    return value


def _gid(value: object) -> object:
    if (isinstance(value, str) and value != "") or (isinstance(value, int) and not 1 <= value <= 2**31 - 1):
        raise refused()
    return value


def _scripts(value: object) -> object:
    if isinstance(value, Mapping) and not all(
        isinstance(dest, str) and re.fullmatch(ABSOLUTE_PATH, dest) and isinstance(source, str)
        for dest, source in value.items()
    ):
        raise refused()
    return value


# What the schema can say of an allowlist entry (a name, [address] or address, optionally :port; no blank, wildcard
# or comment); the validator reads each as the proxy will (`core/egress.parse_allowlist`).
ALLOWLIST_ENTRY: Final = r"(?:\[[0-9A-Fa-f:.]+\]|[^:\s*#\[\]]+)(?::[0-9]{1,5})?"
_USER: Final = TextForm(pattern=r"[a-z_][a-z0-9_-]{0,31}", what="a user name")
_ABSOLUTE: Final = TextForm(pattern=ABSOLUTE_PATH, what="an absolute path")
# The role's variables arrive typed from the inventory; the type check before validation has refused other types.
Text = Annotated[str | None, AnyTextForm()]
UserName = Annotated[str | None, matching(_USER), _USER]
AbsolutePath = Annotated[str | None, matching(_ABSOLUTE), _ABSOLUTE]
Switch = Annotated[bool | None, FlagForm()]
Gid = Annotated[int | str | None, BeforeValidator(_gid), GidForm()]
Scripts = Annotated[dict[str, str] | None, BeforeValidator(_scripts), ScriptsForm()]
ProviderKeys = Annotated[dict[str, str] | None, BeforeValidator(_provider_keys), ProviderKeysForm()]
Secret = Annotated[str | None, AnyTextForm(secret=True)]
Allowlist = Annotated[list[str] | None, BeforeValidator(_allowlist), AllowlistForm()]
ProfileLists = Annotated[dict[str, list[str] | str] | None, BeforeValidator(_profile_lists), ProfileListsForm()]


@dataclass(frozen=True, kw_only=True)
class DocumentForm(Form):
    """A JSON file's content, declared in the inventory as a mapping and written out by the role."""

    what: str

    def host_types(self) -> tuple[type, ...]:
        return (dict,)

    def noun(self, bounds: Bounds) -> str:
        return self.what

    def host_schema(self, bounds: Bounds) -> dict[str, Any]:
        return {"type": "object"}


def _document(parse: Callable[[object], object], errors: type[Exception]) -> BeforeValidator:
    """Refuses a mapping the worker would refuse to boot with, in the worker's own words."""

    def check(value: object) -> object:
        if isinstance(value, Mapping):
            try:
                parse(value)
            except errors as error:
                raise refused(str(error)) from None
        return value

    return BeforeValidator(check)


ScopedLimitsDocument = Annotated[
    dict[str, Any] | None,
    _document(parse_scoped_limits, ScopedLimitsError),
    DocumentForm(what="the scoped limits as a mapping: {version: 1, limits: [{scope: acme/web, day: 20}]}"),
]
PauseWindowsDocument = Annotated[
    dict[str, Any] | None,
    _document(parse_pause_windows, PauseWindowsError),
    DocumentForm(what='the pause windows as a mapping: {windows: [{scope: acme/web, from: "22:00", to: "06:00"}]}'),
]


def role_var(suffix: str, description: str, fix: str) -> Any:
    return Field(
        None, validation_alias=PREFIX + suffix, description=f"Role: {description}", json_schema_extra={X_FIX: fix}
    )


class RoleVars(BaseModel):
    """The worker role's own variables: they share the prefix but never reach the env file."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    package: Text = role_var(
        "package",
        "what to install: a pip requirement, or a wheel file on the controller; empty installs the wheel "
        "ansible/site.yml builds from its checkout. Pin it to upgrade or roll back.",
        "a requirement such as pi-dispatch==0.1.0, a path ending in .whl, or empty",
    )
    service_state: Text = role_var(
        "service_state", "the worker unit's state (started by default).", "started, stopped or restarted"
    )
    service_enabled: Switch = role_var("service_enabled", "whether the worker starts at boot.", "true or false")
    user: UserName = role_var("user", "the system user the worker runs as.", "a user name such as pi-dispatch")
    home: AbsolutePath = role_var(
        "home", "the worker user's home, writable by the worker.", "an absolute path such as /var/lib/pi-dispatch"
    )
    venv: AbsolutePath = role_var(
        "venv", "where the package's venv is installed.", "an absolute path such as /opt/pi-dispatch/venv"
    )
    env_file: AbsolutePath = role_var(
        "env_file",
        "where the rendered env file goes (mode 0600).",
        "an absolute path such as /etc/pi-dispatch/worker.env",
    )
    install_docker: Switch = role_var("install_docker", "install docker.io from Debian.", "true or false")
    isolate_jobs: Switch = role_var(
        "isolate_jobs",
        "keep jobs to the internet (on by default): a oneshot unit runs `pi-dispatch job-network` for the network "
        "pi_dispatch_worker_job_network names each time Docker starts, so jobs reach neither this host, the store, "
        "private ranges nor 169.254.169.254.",
        "true or false; with true, set pi_dispatch_worker_job_network to the network's name (pi-jobs)",
    )
    isolate_jobs_deny: Text = role_var(
        "isolate_jobs_deny",
        "addresses or IPv4 ranges jobs must not reach besides the private ones (a store on a public address), "
        "comma-separated.",
        "such as 203.0.113.7,198.51.100.0/24, or empty",
    )
    egress_allowlist: Allowlist = role_var(
        "egress_allowlist",
        "where this host's jobs may connect with PI_EGRESS on: entries of the reference's egress-allowlist.conf "
        "(api.example.com, .example.com for a domain and its subdomains, name:port for a port other than 443), "
        "written beside the env file (or to PI_EGRESS_ALLOWLIST_FILE) for the egress proxy.",
        "a list such as [api.anthropic.com, github.com, raw.githubusercontent.com, .example.com]",
    )
    egress_profiles: ProfileLists = role_var(
        "egress_profiles",
        "secret or wait profiles with an egress allowlist of their own, in the same grammar: a job binding one "
        "reaches what its list lists instead of this host's; `offline` (or an empty list): its jobs get no network. "
        "Written beside the env file (egress-profiles/<name>.conf) and named in PI_EGRESS_PROFILES.",
        "a mapping such as {deploy: [api.example.com], sealed: offline}",
    )
    scoped_limits: ScopedLimitsDocument = role_var(
        "scoped_limits",
        "the fleet's scoped limits (declare them once, in group_vars, so every host counts alike): per repository "
        "or folder, caps on starts a day, week or month and on how many run at once. Written beside the env file "
        "(scoped-limits.json) and named in PI_SCOPED_LIMITS_FILE; the worker reads an edit without a restart.",
        "a mapping such as {version: 1, limits: [{scope: acme/web, day: 20, concurrent: 1}]}",
    )
    pause_windows: PauseWindowsDocument = role_var(
        "pause_windows",
        "times a repository's or a folder's jobs wait (declare them once, in group_vars). Written beside the env "
        "file (pause-windows.json) and named in PI_PAUSE_WINDOWS_FILE; read again on an edit.",
        'a mapping such as {windows: [{scope: acme/web, from: "22:00", to: "06:00", tz: Europe/Amsterdam}]}',
    )
    github_pat: Secret = role_var(
        "github_pat",
        "the GitHub token a host's jobs use with GITHUB_AUTH_SOURCE=pat, written to the env file (0600) under the "
        "variable GITHUB_PAT_VAR names (GITHUB_PAT).",
        "the token, from a vault",
    )
    provider_keys: ProviderKeys = role_var(
        "provider_keys",
        "the model provider's key under pi's own variable, written to the env file (0600): what its jobs' runner "
        "reads (ANTHROPIC_API_KEY, OPENAI_API_KEY, ...).",
        'a mapping such as {ANTHROPIC_API_KEY: "{{ vault_anthropic_key }}"}',
    )
    egress_proxy: Switch = role_var(
        "egress_proxy",
        "run the egress proxy's unit (on by default with PI_EGRESS on); false where the proxy runs elsewhere.",
        "true or false",
    )
    gvisor: Switch = role_var(
        "gvisor",
        "install gVisor's runsc and register it with Docker as the runsc runtime (for pi_dispatch_worker_job_runtime "
        "or pi_dispatch_worker_runsc_profiles); the worker tries it at boot with a canary.",
        "true or false",
    )
    gvisor_source: Text = role_var(
        "gvisor_source",
        "where runsc comes from: gvisor (its own apt repository, a current release; the default) or debian (Debian's "
        "package, older).",
        "gvisor or debian",
    )
    gvisor_flags: Text = role_var(
        "gvisor_flags",
        "runsc's flags in Docker's runtime entry (daemon.json runtimeArgs), space separated.",
        "flags such as --network=host --platform=systrap, or empty",
    )
    docker_proxy: Switch = role_var(
        "docker_proxy",
        "reach Docker through a socket proxy that passes only the worker's calls, instead of the docker group.",
        "true or false",
    )
    docker_gid: Gid = role_var(
        "docker_gid", "the docker group's gid when it must match a socket made elsewhere.", "a gid, or empty"
    )
    scripts: Scripts = role_var(
        "scripts",
        "resolver and check scripts to deploy, destination path -> source file on the controller (relative to "
        "pi_dispatch_worker_scripts_dir).",
        "absolute destination paths mapped to source files",
    )
    scripts_dir: Text = role_var(
        "scripts_dir",
        "the controller folder relative script sources are found in (default: the inventory's files/).",
        "a folder on the controller",
    )
    triggers_source: Text = role_var(
        "triggers_source",
        "this host's triggers file on the controller (absolute, or in pi_dispatch_worker_scripts_dir): installed "
        "0644 next to the env file as PI_TRIGGERS_FILE, its cron entries scheduled on this host; the audit reads "
        "it. Unset: no cron on this host.",
        "a file on the controller, such as mini1-triggers.json beside the scripts",
    )


def host_forms() -> dict[str, tuple[Form, str]]:
    """Every `pi_dispatch_worker_*` variable: its form and its fix, the worker's settings first."""
    forms = {
        variable: (form_of(info), extra(info, X_FIX))
        for name, info in WorkerSettings.model_fields.items()
        if (variable := host_variable(name, info)) is not None
    }
    for info in RoleVars.model_fields.values():
        forms[str(info.validation_alias)] = (form_of(info), extra(info, X_FIX))
    return forms


def host_variable(field_name: str, info: FieldInfo) -> str | None:
    """The inventory variable that declares a setting: `pi_dispatch_worker_<field>` unless it names its own;
    None for a setting the role renders itself."""
    declared = info.json_schema_extra.get(X_HOST_VAR) if isinstance(info.json_schema_extra, dict) else None
    if declared == ENV_ONLY:
        return None
    return HOST_VAR_PREFIX + str(declared or field_name)


def declared_whole(field_name: str, declared: object) -> int:
    """A whole-number setting a host runs with (`steal_after_ms`), from what its inventory declares: the default
    when it declares nothing."""
    value = declared if isinstance(declared, int) and not isinstance(declared, bool) else None
    return value if value is not None else int(WorkerSettings.model_fields[field_name].default)
