"""The store's ACL file, rendered by pi-dispatch itself on the controller: the users and their rules are declared
once, in `pi_dispatch/core/storeusers.py`, which the tests hold against a real store."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError


def pi_dispatch_store_acl(admin_password: str, passwords: dict[str, Any]) -> str:
    try:
        from pi_dispatch.core.storeusers import acl_file
    except ImportError as error:
        raise AnsibleFilterError(
            "pi-dispatch is not importable on the controller: run ansible-playbook from its venv"
        ) from error
    try:
        return acl_file(str(admin_password), {str(role): str(password) for role, password in passwords.items()})
    except ValueError as error:
        raise AnsibleFilterError(f"pi_dispatch_valkey_users: {error}") from error


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"pi_dispatch_store_acl": pi_dispatch_store_acl}
