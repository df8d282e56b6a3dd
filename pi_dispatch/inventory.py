"""The fleet as an Ansible inventory declares it, loaded through ansible-core's own loader.

Worker hosts are the members of the `pi_dispatch_workers` group; each declares its worker through
`pi_dispatch_worker_*` variables (templated, so vault lookups and `{{ groups[...] }}` work). A host's
variables render to the env file its worker reads: one rule, used by `pi-dispatch config render` and by
the Ansible role alike, so the two produce the same bytes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pi_dispatch.envfile import render_env
from pi_dispatch.errors import ConfigError, Problem
from pi_dispatch.profiles import render_profiles
from pi_dispatch.schemas import problems
from pi_dispatch.settings import check_worker_env

WORKERS_GROUP: Final = "pi_dispatch_workers"
STORE_GROUP: Final = "pi_dispatch_store"
PREFIX: Final = "pi_dispatch_worker_"

# host variable -> env variable, in the order the env file lists them
ENV_OF: Final = {
    f"{PREFIX}name": "PI_WORKER_NAME",
    f"{PREFIX}secret_profiles": "PI_SECRET_PROFILES",
    f"{PREFIX}wait_profiles": "PI_WAIT_PROFILES",
    f"{PREFIX}valkey_url": "VALKEY_URL",
    f"{PREFIX}valkey_password": "VALKEY_PASSWORD",
    f"{PREFIX}concurrency": "PI_CONCURRENCY",
    f"{PREFIX}logs_dir": "PI_LOGS_DIR",
    f"{PREFIX}jobs_dir": "PI_JOBS_DIR",
    f"{PREFIX}log_retention_days": "PI_LOG_RETENTION_DAYS",
    f"{PREFIX}capture_job_logs": "PI_CAPTURE_JOB_LOGS",
    f"{PREFIX}job_image": "PI_JOB_IMAGE",
    f"{PREFIX}job_timeout_ms": "PI_JOB_TIMEOUT_MS",
    f"{PREFIX}job_memory_mb": "PI_JOB_MEMORY_MB",
    f"{PREFIX}job_cpus": "PI_JOB_CPUS",
    f"{PREFIX}drain_grace_ms": "PI_DRAIN_GRACE_MS",
    f"{PREFIX}tz": "TZ",
}
HEADER: Final = "Rendered by pi-dispatch from the inventory for host {host}; a rollout overwrites edits."


@dataclass(frozen=True)
class InventoryHost:
    """One worker host: its inventory name and its `pi_dispatch_worker_*` variables, plain and templated."""

    name: str
    vars: dict[str, Any]
    source: str

    @property
    def worker_name(self) -> str | None:
        value = self.vars.get(f"{PREFIX}name")
        return value if isinstance(value, str) and value else None

    @property
    def secret_profiles(self) -> dict[str, str]:
        return _table(self.vars.get(f"{PREFIX}secret_profiles"))

    @property
    def wait_profiles(self) -> dict[str, str]:
        return _table(self.vars.get(f"{PREFIX}wait_profiles"))


def _table(value: object) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, Mapping) else {}


def _plain(value: object) -> Any:
    """Ansible's tagged strings and dicts as plain Python values."""
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    return value


def load_inventory(path: Path) -> list[InventoryHost]:
    """The worker hosts of an inventory (file or directory), in inventory order."""
    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar
    from ansible.vars.manager import VariableManager

    source = str(path)
    if not path.exists():
        raise ConfigError([Problem(source, "does not exist", source, "pass the inventory file or directory with -i")])
    try:
        loader = DataLoader()
        inventory = InventoryManager(loader=loader, sources=[source])
        variables = VariableManager(loader=loader, inventory=inventory)
        group = inventory.groups.get(WORKERS_GROUP)
        if group is None:
            raise ConfigError(
                [
                    Problem(
                        source,
                        f"has no group {WORKERS_GROUP}",
                        source,
                        f"put the worker hosts in a group named {WORKERS_GROUP}",
                    )
                ]
            )
        hosts = []
        for host in group.get_hosts():
            all_vars = variables.get_vars(host=host, include_hostvars=True)
            ours = {key: value for key, value in all_vars.items() if key.startswith(PREFIX)}
            templated = Templar(loader=loader, variables=all_vars).template(ours)
            hosts.append(InventoryHost(host.name, _plain(templated), source))
        return hosts
    except AnsibleError as error:
        raise ConfigError(
            [Problem(source, f"cannot be loaded: {str(error).splitlines()[0]}", source, "fix the inventory")]
        ) from error


def env_values(host_vars: Mapping[str, Any]) -> dict[str, str]:
    """The env variables a host's declarations set, as strings, in the env file's order."""
    values: dict[str, str] = {}
    for variable, env in ENV_OF.items():
        value = host_vars.get(variable)
        if value is None or value == {}:
            continue
        if isinstance(value, Mapping):
            values[env] = render_profiles({str(k): str(v) for k, v in value.items()})
        elif isinstance(value, bool):
            values[env] = "1" if value else "0"
        else:
            values[env] = str(value)
    return values


_TYPES: Final[dict[str, type | tuple[type, ...]]] = {
    "name": str,
    "valkey_url": str,
    "valkey_password": str,
    "logs_dir": str,
    "jobs_dir": str,
    "job_image": str,
    "tz": str,
    "triggers_file": str,
    "concurrency": int,
    "log_retention_days": int,
    "job_timeout_ms": int,
    "job_memory_mb": int,
    "drain_grace_ms": int,
    "job_cpus": (int, float),
    "capture_job_logs": bool,
    # the Ansible role's own settings, which share the prefix but never reach the env file
    "package": str,
    "source": str,
    "user": str,
    "home": str,
    "venv": str,
    "env_file": str,
    "install_docker": bool,
    "docker_gid": (int, str),
    "scripts": dict,
    "scripts_dir": str,
    "secret_profiles": dict,
    "wait_profiles": dict,
}
_LIMITS: Final[dict[str, tuple[float, float]]] = {
    "concurrency": (1, 999),
    "log_retention_days": (0, 36500),
    "job_timeout_ms": (1, 604_800_000),
    "job_memory_mb": (6, 1_048_576),
    "drain_grace_ms": (1, 3_600_000),
    "job_cpus": (0.01, 9999.99),
}


def _shape_problems(host_vars: Mapping[str, Any], source: str) -> list[Problem]:
    """Unknown variables and values of the wrong type."""
    found = [
        Problem(key, "is not a variable pi-dispatch knows", source, "check the spelling")
        for key in host_vars
        if key.startswith(PREFIX) and key.removeprefix(PREFIX) not in _TYPES
    ]
    for suffix, expected in _TYPES.items():
        value = host_vars.get(PREFIX + suffix)
        wrong_bool = expected is not bool and isinstance(value, bool)
        if value is not None and (not isinstance(value, expected) or wrong_bool):
            type_name = expected.__name__ if isinstance(expected, type) else "number"
            found.append(Problem(PREFIX + suffix, f"{value!r} is not a {type_name}", source, f"use a {type_name}"))
        elif isinstance(value, dict):
            found += [
                Problem(
                    f"{PREFIX}{suffix}/{name}",
                    "must map a profile name to a script path",
                    source,
                    "name: /absolute/path",
                )
                for name, path in value.items()
                if not isinstance(name, str) or not isinstance(path, str)
            ]
    return found


_ROLE_USER: Final = re.compile(r"[a-z_][a-z0-9_-]{0,31}")


def _role_problems(host_vars: Mapping[str, Any], source: str) -> list[Problem]:
    """Paths that must be absolute, the role's user name and docker gid."""
    found: list[Problem] = []
    scripts = host_vars.get(f"{PREFIX}scripts") or {}
    paths = [(f"{PREFIX}{key}", host_vars.get(PREFIX + key)) for key in ("triggers_file", "home", "venv", "env_file")]
    paths += [(f"{PREFIX}scripts/{dest}", dest) for dest in scripts]
    for variable, path in paths:
        if isinstance(path, str) and not (path.startswith("/") and path.isprintable()):
            found.append(Problem(variable, f"{path!r} is not an absolute path", source, "an absolute path"))
    user = host_vars.get(f"{PREFIX}user")
    if isinstance(user, str) and not _ROLE_USER.fullmatch(user):
        found.append(Problem(f"{PREFIX}user", f"{user!r} is not a user name", source, "e.g. pi-dispatch"))
    gid = host_vars.get(f"{PREFIX}docker_gid")
    if (isinstance(gid, str) and gid != "") or (isinstance(gid, int) and not 1 <= gid <= 2**31 - 1):
        found.append(Problem(f"{PREFIX}docker_gid", f"{gid!r} is not a gid", source, "a whole number, or empty"))
    return found


def check_host_vars(host_vars: Mapping[str, Any], source: str = "") -> list[Problem]:
    """The typed check of a host's declarations, independent of the schema: types, ranges, and the env it renders."""
    found = _shape_problems(host_vars, source)
    if found:
        return found
    for suffix, (low, high) in _LIMITS.items():
        value = host_vars.get(PREFIX + suffix)
        if isinstance(value, (int, float)) and not low <= value <= high:
            kind = "a number" if suffix == "job_cpus" else "a whole number"
            found.append(
                Problem(PREFIX + suffix, f"{value} is outside {low}..{high}", source, f"{kind} from {low} to {high}")
            )
    for key in ("name", "logs_dir", "jobs_dir"):
        if host_vars.get(PREFIX + key) == "":
            found.append(Problem(PREFIX + key, "is empty", source, "give a value, or leave the variable out"))
    found += _role_problems(host_vars, source)
    for suffix in ("secret_profiles", "wait_profiles"):
        table = host_vars.get(PREFIX + suffix) or {}
        found += [
            Problem(
                f"{PREFIX}{suffix}/{name}",
                f"the name {name!r} is not valid",
                source,
                "letters, digits, dot, dash, underscore",
            )
            for name in table
            if ":" in name or "," in name or name.strip() != name
        ]
        if len(table) > 256:
            found.append(
                Problem(PREFIX + suffix, f"declares {len(table)} profiles; at most 256", source, "declare fewer")
            )
    env_to_var = {env: var for var, env in ENV_OF.items()}
    for problem in check_worker_env(env_values(host_vars), source):
        variable = problem.subject.split(" ", 1)[0]
        found.append(Problem(env_to_var.get(variable, variable), problem.message, source, problem.fix))
    return found


def host_problems(host: InventoryHost) -> list[Problem]:
    """The schema's verdict on a host's declarations, worded by the typed check where it can be."""
    schema_problems = problems("host-vars", host.vars, f"{host.source} host {host.name}")
    own = check_host_vars(host.vars, f"{host.source} host {host.name}")
    return own if own else schema_problems


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
