"""An inventory host's `pi_dispatch_worker_*` variables: checked, and rendered into the env file its worker reads.

Each worker setting has one host variable (`WorkerSettings` says which); the worker role's own variables share
the prefix but never reach the env file (`rolevars.py` declares them, and the form of every host variable). One
rendering rule serves `pi-dispatch config render` and the Ansible role alike, so the two produce the same bytes.
Nothing here needs Ansible: the loader that reads an inventory lives in `fleet/inventory.py`, for the controller.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pydantic import ValidationError

from pi_dispatch.config.envfile import parse_env_text, render_env
from pi_dispatch.config.forgevars import MULTILINE_VARIABLES
from pi_dispatch.config.forms import ProfilesForm, TextForm
from pi_dispatch.config.kinds import field_problems, form_of
from pi_dispatch.config.rolevars import PREFIX, RoleVars, host_forms, host_variable
from pi_dispatch.config.schemas import problems
from pi_dispatch.config.worker_variables import check_worker_env, fields_by_variable
from pi_dispatch.core.errors import ConfigError, Problem
from pi_dispatch.core.names import PROFILE_NAME_RE
from pi_dispatch.core.profiles import ABSOLUTE_SCRIPT, MAX_PROFILES
from pi_dispatch.core.providers import EVERY_KEY
from pi_dispatch.infra.valkey import redacted

WORKERS_GROUP: Final = "pi_dispatch_workers"
HEADER: Final = "Rendered by pi-dispatch from the inventory for host {host}; a rollout overwrites edits."
DEFAULT_ENV_FILE: Final = "/etc/pi-dispatch/worker.env"  # the role's default for pi_dispatch_worker_env_file
TRIGGERS_NAME: Final = "triggers.json"
EGRESS_PROFILES_DIR: Final = "egress-profiles"  # beside the env file: one <profile>.conf per profile list
# The fleet's limit files, each written beside the env file from its role variable (`rolevars.py`)
LIMIT_FILES: Final = {"scoped_limits": "scoped-limits.json", "pause_windows": "pause-windows.json"}


@dataclass(frozen=True)
class InventoryHost:
    """One worker host: its inventory name and its `pi_dispatch_worker_*` variables, plain and templated."""

    name: str
    vars: dict[str, Any]
    source: str
    folder: str | None = None  # the inventory's directory, which relative controller files are found under

    def declared(self, suffix: str) -> Any:
        """The value of `pi_dispatch_worker_<suffix>`, or None."""
        return self.vars.get(PREFIX + suffix)

    def controller_file(self, declared: str) -> Path:
        """A controller file a variable names, as the role finds it: absolute, or in pi_dispatch_worker_scripts_dir
        (by default the inventory's files/ folder)."""
        path = Path(declared)
        if path.is_absolute():
            return path
        folder = self.declared("scripts_dir") or Path(self.folder or ".") / "files"
        return Path(str(folder)) / path

    @property
    def triggers_source(self) -> Path | None:
        """This host's own triggers file on the controller, or None (no cron on this host)."""
        declared = self.declared("triggers_source")
        return self.controller_file(declared) if isinstance(declared, str) and declared else None

    @property
    def worker_name(self) -> str | None:
        value = self.declared("name")
        return value if isinstance(value, str) and value else None

    @property
    def secret_profiles(self) -> dict[str, str]:
        return _table(self.declared("secret_profiles"))

    @property
    def wait_profiles(self) -> dict[str, str]:
        return _table(self.declared("wait_profiles"))


APP_KEY_NAME: Final = "github-app.pem"


def _table(value: object) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, Mapping) else {}


# -- checks and rendering ----------------------------------------------------------------------------------


def _type_name(types: tuple[type, ...]) -> str:
    names = {int: "whole number", float: "number", bool: "boolean", str: "string", dict: "mapping"}
    return " or ".join(dict.fromkeys(names.get(kind, kind.__name__) for kind in types if kind is not type(None)))


def _shape_problems(host_vars: Mapping[str, Any], source: str) -> list[Problem]:
    """Unknown variables, values of the wrong type, and empty values a form refuses."""
    forms = host_forms()
    found = [
        Problem(key, "is not a variable pi-dispatch knows", source, "check the spelling")
        for key in host_vars
        if key.startswith(PREFIX) and key not in forms
    ]
    for variable, (form, _) in forms.items():
        if variable not in host_vars:
            continue
        value, types = host_vars[variable], form.host_types()
        wrong_bool = bool not in types and isinstance(value, bool)
        if wrong_bool or not isinstance(value, types):
            kind = _type_name(types)
            found.append(Problem(variable, f"{value!r} is not a {kind}", source, f"use a {kind}"))
        elif value == "" and isinstance(form, TextForm) and re.fullmatch(form.pattern, "") is None:
            found.append(Problem(variable, "is empty", source, "give a value, or leave the variable out"))
    return found


def _table_problems(variable: str, table: Mapping[object, object], source: str) -> list[Problem]:
    """Names and paths a profile mapping may hold: what the env grammar can carry and read back the same."""
    found = [
        Problem(
            f"{variable}/{name}", f"the name {name!r} is not valid", source, "letters, digits, dot, dash, underscore"
        )
        for name in table
        if not isinstance(name, str) or PROFILE_NAME_RE.fullmatch(name) is None
    ]
    found += [
        Problem(f"{variable}/{name}", "must map a profile name to a script path", source, "name: /absolute/path")
        for name, path in table.items()
        if not isinstance(path, str)
    ]
    found += [
        Problem(f"{variable}/{name}", f"{path!r} is not an absolute path", source, "name: /absolute/path")
        for name, path in table.items()
        if isinstance(path, str) and re.fullmatch(ABSOLUTE_SCRIPT, path) is None
    ]
    if len(table) > MAX_PROFILES:
        found.append(
            Problem(variable, f"declares {len(table)} profiles; at most {MAX_PROFILES}", source, "declare fewer")
        )
    return found


def triggers_beside(env_file: str) -> str:
    """Where the role installs a host's triggers file: beside its env file."""
    return f"{env_file.rsplit('/', 1)[0]}/{TRIGGERS_NAME}"


def installed_app_key_path(host_vars: Mapping[str, Any]) -> str | None:
    """Where the role installs a host's GitHub App key (0600, the worker's own): beside its env file; None when the
    inventory gives no key."""
    if not host_vars.get(PREFIX + "github_app_private_key"):
        return None
    return f"{str(host_vars.get(PREFIX + 'env_file') or DEFAULT_ENV_FILE).rsplit('/', 1)[0]}/{APP_KEY_NAME}"


def installed_triggers_path(host_vars: Mapping[str, Any]) -> str | None:
    """The PI_TRIGGERS_FILE a host's worker gets, or None when it declares no triggers file."""
    if not host_vars.get(PREFIX + "triggers_source"):
        return None
    return triggers_beside(str(host_vars.get(PREFIX + "env_file") or DEFAULT_ENV_FILE))


def installed_limit_file(host_vars: Mapping[str, Any], role_var: str) -> str | None:
    """Where the role writes one of the fleet's limit files for a host (None: it declares none)."""
    if not isinstance(host_vars.get(PREFIX + role_var), Mapping):
        return None
    return f"{str(host_vars.get(PREFIX + 'env_file') or DEFAULT_ENV_FILE).rsplit('/', 1)[0]}/{LIMIT_FILES[role_var]}"


def limit_file_text(declared: object) -> str:
    """A limit file as the role writes it from its mapping in the inventory."""
    return json.dumps(declared, indent=2, sort_keys=True) + "\n"


def installed_egress_profiles(host_vars: Mapping[str, Any]) -> dict[str, str]:
    """The PI_EGRESS_PROFILES a host's worker gets: each profile list the role writes, by profile."""
    declared = host_vars.get(PREFIX + "egress_profiles")
    folder = f"{str(host_vars.get(PREFIX + 'env_file') or DEFAULT_ENV_FILE).rsplit('/', 1)[0]}/{EGRESS_PROFILES_DIR}"
    return {str(name): f"{folder}/{name}.conf" for name in declared} if isinstance(declared, Mapping) else {}


def env_values(host_vars: Mapping[str, Any]) -> dict[str, str]:
    """The env variables a host's declarations set, as strings, in the env file's order."""
    values: dict[str, str] = {}
    rendered: dict[str, object] = {  # what the role itself puts in place
        "PI_TRIGGERS_FILE": installed_triggers_path(host_vars),
        "PI_EGRESS_PROFILES": installed_egress_profiles(host_vars),
        "PI_SCOPED_LIMITS_FILE": installed_limit_file(host_vars, "scoped_limits"),
        "PI_PAUSE_WINDOWS_FILE": installed_limit_file(host_vars, "pause_windows"),
        "GITHUB_APP_PRIVATE_KEY_PATH": installed_app_key_path(host_vars),
    }
    for variable, (name, info) in fields_by_variable().items():
        declared = host_variable(name, info)
        value = host_vars.get(declared) if declared is not None else rendered.get(variable)
        if variable in rendered and rendered[variable] is not None:  # the role's own file wins (the App's key)
            value = rendered[variable]
        elif variable == "GITHUB_APP_PRIVATE_KEY":  # installed as a file of its own, never inline
            continue
        if value is None or value == {}:
            continue
        text = form_of(info).env_text(value)
        values[variable] = text.replace("\n", "\\n") if variable in MULTILINE_VARIABLES else text
    pat = host_vars.get(PREFIX + "github_pat")
    if isinstance(pat, str) and pat:  # held under the variable GITHUB_PAT_VAR names, as the worker reads it
        values[str(host_vars.get(PREFIX + "github_pat_var") or "GITHUB_PAT")] = pat
    keys = host_vars.get(PREFIX + "provider_keys")
    values |= {name: key for name, key in keys.items() if isinstance(key, str)} if isinstance(keys, Mapping) else {}
    return values


def env_changes(deployed: str, rendered: str) -> list[str]:
    """What a rollout changes in a host's env file, as `-NAME=old` and `+NAME=new` lines in the file's order,
    with every secret (and a password inside VALKEY_URL) masked: what `--check --diff` may show."""
    secret = {variable for variable, (_, info) in fields_by_variable().items() if form_of(info).secret}

    def shown(name: str, value: str) -> str:
        return f"{name}={'********' if name in secret else redacted(value) if name == 'VALKEY_URL' else value}"

    old = parse_env_text(deployed, "deployed").values
    new = parse_env_text(rendered, "rendered").values
    # a provider's key and the PAT, held under pi's names and the one GITHUB_PAT_VAR names
    secret |= EVERY_KEY | {values.get("GITHUB_PAT_VAR") or "GITHUB_PAT" for values in (old, new)}
    changes = []
    for name in [*new, *(name for name in old if name not in new)]:
        if old.get(name) == new.get(name):
            continue
        changes += [f"-{shown(name, old[name])}"] if name in old else []
        changes += [f"+{shown(name, new[name])}"] if name in new else []
    return changes


def check_host_vars(host_vars: Mapping[str, Any], source: str = "") -> list[Problem]:
    """The typed check of a host's declarations, independent of the schema: types, forms, and the env it renders."""
    found = _shape_problems(host_vars, source)
    if found:
        return found
    tables = {
        variable: _table_problems(variable, value, source)
        for variable, (form, _) in host_forms().items()
        if isinstance(form, ProfilesForm) and isinstance(value := host_vars.get(variable), Mapping)
    }
    found += [problem for table in tables.values() for problem in table]
    try:
        RoleVars.model_validate(host_vars)
    except ValidationError as error:
        found += field_problems(error, RoleVars, host_vars, source)
    # a table with problems would render into a different table; it has been reported as declared
    renderable = {key: value for key, value in host_vars.items() if not tables.get(key)}
    host_var_of = {
        variable: host_variable(name, info) or variable for variable, (name, info) in fields_by_variable().items()
    }
    for problem in check_worker_env(env_values(renderable), source):
        variable, _, rest = problem.subject.partition(" ")
        subject = host_var_of.get(variable, variable) + (f" {rest}" if rest else "")
        found.append(Problem(subject, problem.message, source, problem.fix))
    return found


def host_problems(host: InventoryHost) -> list[Problem]:
    """The schema's verdict on a host's declarations, worded by the typed check where it can be."""
    source = f"{host.source} host {host.name}"
    own = check_host_vars(host.vars, source)
    return own if own else problems("host-vars", host.vars, source)


def render_host_env(host: InventoryHost) -> str:
    """The env file this host's worker should have. Raises ConfigError when its declarations are invalid."""
    found = host_problems(host)
    if found:
        raise ConfigError(found)
    return render_env(env_values(host.vars), HEADER.format(host=host.name))


def find_host(hosts: list[InventoryHost], name: str, source: str) -> InventoryHost:
    for host in hosts:
        if host.name == name:
            return host
    known = ", ".join(host.name for host in hosts) or "none"
    raise ConfigError(
        [Problem(f"host {name!r}", f"is not in the {WORKERS_GROUP} group", source, f"use one of: {known}")]
    )
