"""The env file a host's console gets, rendered by pi-dispatch itself on the controller.

The controller runs ansible-playbook from a Python that has pi-dispatch installed (the project's venv).
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError


def pi_dispatch_console_env_file(host_vars: dict[str, Any], host: str) -> str:
    try:
        from pi_dispatch.config.console_settings import render_console_env
        from pi_dispatch.core.errors import ConfigError
    except ImportError as error:
        raise AnsibleFilterError(
            "pi-dispatch is not importable on the controller: run ansible-playbook from its venv"
        ) from error
    try:
        return render_console_env(host_vars, host)
    except (ConfigError, ValueError) as error:
        raise AnsibleFilterError(f"{host}: the inventory declares an invalid console\n{error}") from error


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"pi_dispatch_console_env_file": pi_dispatch_console_env_file}
