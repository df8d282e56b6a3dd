"""The fleet as an Ansible inventory declares it, loaded through ansible-core's own loader (the controller's extra).

Worker hosts are the members of the `pi_dispatch_workers` group; each declares its worker through
`pi_dispatch_worker_*` variables (templated, so vault lookups and `{{ groups[...] }}` work). What those
variables mean, and the env file they render to, is `config/hostvars.py`, which needs no Ansible. Receivers are the
members of `pi_dispatch_receivers`; the audit reads the triggers file each one is deployed with.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pi_dispatch.config.hostvars import PREFIX, WORKERS_GROUP, InventoryHost
from pi_dispatch.config.receiver_settings import RECEIVER_PREFIX
from pi_dispatch.core.errors import ConfigError, Problem
from pi_dispatch.infra.extras import require

RECEIVERS_GROUP = "pi_dispatch_receivers"


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


def _hosts_of(
    path: Path, group_name: str, prefix: str, required: bool, extra: Mapping[str, Any] | None = None
) -> list[InventoryHost]:
    """The hosts of one group with their templated `prefix*` variables; the group must exist when required.
    extra: variables given on the command line (`-e`), which win over the inventory's, as Ansible's extra vars do."""
    require("controller", "ansible")
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
        group = inventory.groups.get(group_name)
        if group is None:
            if not required:
                return []
            fix = f"put the worker hosts in a group named {group_name}"
            raise ConfigError([Problem(source, f"has no group {group_name}", source, fix)])
        hosts = []
        for host in group.get_hosts():
            all_vars = variables.get_vars(host=host, include_hostvars=True) | dict(extra or {})
            ours = {key: value for key, value in all_vars.items() if key.startswith(prefix)}
            ours |= {"inventory_dir": all_vars.get("inventory_dir")}
            templated = Templar(loader=loader, variables=all_vars).template(ours)
            hosts.append(InventoryHost(host.name, _plain(templated), source))
        return hosts
    except AnsibleError as error:
        raise ConfigError(
            [Problem(source, f"cannot be loaded: {str(error).splitlines()[0]}", source, "fix the inventory")]
        ) from error


def load_inventory(path: Path, extra: Mapping[str, Any] | None = None) -> list[InventoryHost]:
    """The worker hosts of an inventory (file or directory), in inventory order."""
    hosts = _hosts_of(path, WORKERS_GROUP, PREFIX, required=True, extra=extra)
    return [
        InventoryHost(
            host.name,
            {k: v for k, v in host.vars.items() if k != "inventory_dir"},
            host.source,
            str(host.vars.get("inventory_dir") or (path if path.is_dir() else path.parent)),
        )
        for host in hosts
    ]


def receiver_triggers(path: Path) -> list[Path]:
    """The triggers files the inventory's receivers serve (`pi_dispatch_receiver_triggers_source`, else the
    `triggers.json` beside the inventory), as the role deploys them."""
    found = []
    for host in _hosts_of(path, RECEIVERS_GROUP, RECEIVER_PREFIX, required=False):
        declared = host.vars.get(RECEIVER_PREFIX + "triggers_source")
        folder = Path(str(host.vars.get("inventory_dir") or (path if path.is_dir() else path.parent)))
        file = Path(str(declared)) if declared else folder / "triggers.json"
        found.append(file if file.is_absolute() else folder / file)
    return list(dict.fromkeys(found))
