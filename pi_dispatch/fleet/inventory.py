"""The fleet as an Ansible inventory declares it, loaded through ansible-core's own loader (the controller's extra).

Worker hosts are the members of the `pi_dispatch_workers` group; each declares its worker through
`pi_dispatch_worker_*` variables (templated as ansible-playbook templates them: lookups, `{{ groups[...] }}`, and
vaulted values decrypted with the vault password Ansible's own configuration names). What those
variables mean, and the env file they render to, is `config/hostvars.py`, which needs no Ansible. Receivers are the
members of `pi_dispatch_receivers`; the audit reads the triggers file each one is deployed with.
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from pi_dispatch.config.hostvars import WORKERS_GROUP, InventoryHost
from pi_dispatch.config.receiver_settings import RECEIVER_PREFIX
from pi_dispatch.config.rolevars import PREFIX
from pi_dispatch.core.errors import ConfigError, Problem
from pi_dispatch.infra.extras import require

RECEIVERS_GROUP = "pi_dispatch_receivers"
# What an inventory folder holds beside the inventory (the roles' scripts, the demo's jobs, the triggers files):
# Ansible would try to parse each as an inventory source and warn. The ansible.cfg files say the same to
# ansible-playbook run from the checkout or from ansible/.
NOT_INVENTORY: Final = (r"^files$", r"^jobs$", r"triggers\.json$")


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


@functools.cache
def _vault_secrets() -> list[Any]:
    """What ansible-playbook sets up before it reads an inventory, once per process: the plugin loader (so lookups
    such as `password`, `file` and `env` resolve) and the vault secrets from Ansible's configuration
    (`ANSIBLE_VAULT_PASSWORD_FILE`, `ANSIBLE_VAULT_IDENTITY_LIST` or their ansible.cfg keys). Never prompts."""
    with warnings.catch_warnings():
        # ansible-core 2.19 imports cryptography's DSA, which cryptography 51 deprecates with a warning on import:
        # about Ansible's internals, nothing an operator reading an inventory can act on
        warnings.filterwarnings("ignore", message="DSA is deprecated", category=UserWarning)
        from ansible.cli import CLI
    from ansible.constants import DEFAULT_VAULT_IDENTITY_LIST
    from ansible.parsing.dataloader import DataLoader
    from ansible.plugins.loader import init_plugin_loader
    from ansible.utils.collection_loader import AnsibleCollectionConfig

    if AnsibleCollectionConfig.collection_finder is None:  # an ansible CLI in this process already made it
        init_plugin_loader()
    return list(CLI.setup_vault_secrets(DataLoader(), DEFAULT_VAULT_IDENTITY_LIST, auto_prompt=False))


def _load_problem(source: str, error: Exception) -> Problem:
    first_line = str(error).splitlines()[0] if str(error) else type(error).__name__
    if "vault" in first_line.lower():
        fix = "name the vault password as ansible-playbook reads it: ANSIBLE_VAULT_PASSWORD_FILE=<file> or ansible.cfg"
        return Problem(source, f"cannot be decrypted: {first_line}", source, fix)
    return Problem(source, f"cannot be loaded: {first_line}", source, "fix the inventory")


def _groups_of(
    path: Path, wanted: Mapping[str, tuple[str, bool]], extra: Mapping[str, Any] | None = None
) -> dict[str, list[InventoryHost]]:
    """The hosts of each wanted group (its name: the variable prefix kept, and whether it must exist) with their
    templated variables, from one load of the inventory (a fleet of thousands takes seconds to load).
    extra: variables given on the command line (`-e`), which win over the inventory's, as Ansible's extra vars do."""
    require("controller", "ansible")
    os.environ.setdefault("ANSIBLE_INVENTORY_IGNORE_REGEX", ",".join(NOT_INVENTORY))  # read when ansible loads
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
        loader.set_vault_secrets(_vault_secrets())
        inventory = InventoryManager(loader=loader, sources=[source])
        variables = VariableManager(loader=loader, inventory=inventory)
        # what ansible-playbook adds from its command line, which inventories may name (the example's credentials
        # folder does): the sources as absolute paths, symlinks kept
        as_playbook = {"ansible_inventory_sources": [str(path.expanduser().absolute())]}
        found: dict[str, list[InventoryHost]] = {}
        for group_name, (prefix, required) in wanted.items():
            group = inventory.groups.get(group_name)
            if group is None:
                if required:
                    fix = f"put the worker hosts in a group named {group_name}"
                    raise ConfigError([Problem(source, f"has no group {group_name}", source, fix)])
                found[group_name] = []
                continue
            hosts = found.setdefault(group_name, [])
            for host in group.get_hosts():
                all_vars = variables.get_vars(host=host, include_hostvars=True) | as_playbook | dict(extra or {})
                ours = {key: value for key, value in all_vars.items() if key.startswith(prefix)}
                ours |= {"inventory_dir": all_vars.get("inventory_dir")}
                templated = Templar(loader=loader, variables=all_vars).template(ours)
                hosts.append(InventoryHost(host.name, _plain(templated), source))
        return found
    except AnsibleError as error:
        raise ConfigError([_load_problem(source, error)]) from error


def _folder(path: Path, host: InventoryHost) -> str:
    return str(host.vars.get("inventory_dir") or (path if path.is_dir() else path.parent))


def _workers(path: Path, hosts: list[InventoryHost]) -> list[InventoryHost]:
    return [
        InventoryHost(
            host.name, {k: v for k, v in host.vars.items() if k != "inventory_dir"}, host.source, _folder(path, host)
        )
        for host in hosts
    ]


def _receiver_files(path: Path, hosts: list[InventoryHost]) -> list[Path]:
    found = []
    for host in hosts:
        declared = host.vars.get(RECEIVER_PREFIX + "triggers_source")
        folder = Path(_folder(path, host))
        file = Path(str(declared)) if declared else folder / "triggers.json"
        found.append(file if file.is_absolute() else folder / file)
    return list(dict.fromkeys(found))


def load_inventory(path: Path, extra: Mapping[str, Any] | None = None) -> list[InventoryHost]:
    """The worker hosts of an inventory (file or directory), in inventory order."""
    return load_fleet(path, extra)[0]


def load_fleet(path: Path, extra: Mapping[str, Any] | None = None) -> tuple[list[InventoryHost], list[Path]]:
    """The worker hosts (as `load_inventory`) and the triggers files the inventory's receivers serve
    (`pi_dispatch_receiver_triggers_source`, else the `triggers.json` beside the inventory), as the roles deploy
    them, from one load."""
    groups = _groups_of(path, {WORKERS_GROUP: (PREFIX, True), RECEIVERS_GROUP: (RECEIVER_PREFIX, False)}, extra)
    return _workers(path, groups[WORKERS_GROUP]), _receiver_files(path, groups[RECEIVERS_GROUP])
