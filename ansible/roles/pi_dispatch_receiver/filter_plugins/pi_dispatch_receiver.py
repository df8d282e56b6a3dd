"""The env file a host's receiver gets, rendered by pi-dispatch itself on the controller.

The controller runs ansible-playbook from a Python that has pi-dispatch installed (the project's venv).
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError


def pi_dispatch_receiver_env_file(host_vars: dict[str, Any], host: str, triggers_file: str) -> str:
    try:
        from pi_dispatch.config.receiver_settings import render_receiver_env
        from pi_dispatch.core.errors import ConfigError
    except ImportError as error:
        raise AnsibleFilterError(
            "pi-dispatch is not importable on the controller: run ansible-playbook from its venv"
        ) from error
    try:
        return render_receiver_env(host_vars, host, triggers_file)
    except (ConfigError, ValueError) as error:
        raise AnsibleFilterError(f"{host}: the inventory declares an invalid receiver\n{error}") from error


def pi_dispatch_receiver_descriptors(declared: object) -> int:
    """The unit's LimitNOFILE: what the receiver's declared connection cap (None: the default) needs."""
    from pi_dispatch.config.receiver_settings import unit_descriptor_limit

    try:
        return unit_descriptor_limit(declared)
    except ValueError as error:
        raise AnsibleFilterError(f"pi_dispatch_receiver_max_connections: not a whole number ({error})") from error


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "pi_dispatch_receiver_env_file": pi_dispatch_receiver_env_file,
            "pi_dispatch_receiver_descriptors": pi_dispatch_receiver_descriptors,
        }
