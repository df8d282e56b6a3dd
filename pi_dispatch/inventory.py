"""The fleet as an Ansible inventory declares it, loaded through ansible-core's own loader (the controller's extra).

Worker hosts are the members of the `pi_dispatch_workers` group; each declares its worker through
`pi_dispatch_worker_*` variables (templated, so vault lookups and `{{ groups[...] }}` work). What those
variables mean, and the env file they render to, is `hostvars.py`, which needs no Ansible.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pi_dispatch.errors import ConfigError, Problem
from pi_dispatch.extras import require
from pi_dispatch.hostvars import PREFIX, WORKERS_GROUP, InventoryHost


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
