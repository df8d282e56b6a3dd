"""The env file a host's worker gets, rendered by pi-dispatch itself on the controller.

The role and `pi-dispatch config render` share one renderer, so the deployed file is byte-identical to
what the CLI prints for the same host. The renderer is imported from the pi-dispatch installed on the
controller (its `controller` extra), the Python ansible-playbook runs from; never from a checkout's path.
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError


def pi_dispatch_env_file(host_vars: dict[str, Any], host: str) -> str:
    try:
        from pi_dispatch.config.hostvars import InventoryHost, render_host_env
        from pi_dispatch.core.errors import ConfigError
    except ImportError as error:
        raise AnsibleFilterError(
            "pi-dispatch is not importable on the controller: run ansible-playbook from its venv"
        ) from error
    declared = {key: value for key, value in host_vars.items() if key.startswith("pi_dispatch_worker_")}
    try:
        return render_host_env(InventoryHost(host, declared, "inventory"))
    except ConfigError as error:
        raise AnsibleFilterError(f"{host}: the inventory declares an invalid worker\n{error}") from error


def pi_dispatch_env_changes(deployed: str, rendered: str) -> list[str]:
    """The env lines a rollout changes, secrets masked: what --check --diff shows instead of the file's diff."""
    from pi_dispatch.config.hostvars import env_changes

    return env_changes(deployed, rendered)


def pi_dispatch_worker_triggers_path(env_file: str) -> str:
    """Where this host's triggers file goes: beside its env file, as the env file's PI_TRIGGERS_FILE says."""
    from pi_dispatch.config.hostvars import triggers_beside

    return triggers_beside(env_file)


def pi_dispatch_worker_app_key_path(env_file: str) -> str:
    """Where this host's GitHub App key goes: beside its env file, as its GITHUB_APP_PRIVATE_KEY_PATH says."""
    from pi_dispatch.config.hostvars import PREFIX, installed_app_key_path

    return str(installed_app_key_path({PREFIX + "env_file": env_file, PREFIX + "github_app_private_key": "given"}))


def pi_dispatch_egress_allowlist(entries: list[str], source: str = "pi_dispatch_worker_egress_allowlist") -> str:
    """The egress allowlist file of the inventory's entries, refused naming each bad entry."""
    from pi_dispatch.core.egress import allowlist_text
    from pi_dispatch.core.errors import ConfigError

    try:
        return allowlist_text(entries, source)
    except ConfigError as error:
        raise AnsibleFilterError(f"the inventory declares an invalid egress allowlist\n{error}") from error


def pi_dispatch_egress_profile_files(profiles: dict[str, Any], env_file: str) -> list[dict[str, str]]:
    """Each profile's allowlist file: its profile, where it goes (as PI_EGRESS_PROFILES names it) and its text."""
    from pi_dispatch.config.hostvars import installed_egress_profiles

    paths = installed_egress_profiles(
        {"pi_dispatch_worker_egress_profiles": profiles, "pi_dispatch_worker_env_file": env_file}
    )
    source = "pi_dispatch_worker_egress_profiles.{}"
    return [
        {"name": name, "path": path, "content": pi_dispatch_egress_allowlist(profiles[name], source.format(name))}
        for name, path in paths.items()
    ]


def pi_dispatch_limit_files(host_vars: dict[str, Any]) -> list[dict[str, Any]]:
    """The fleet's limit files a host gets: each one's role variable, path beside the env file, and JSON (None: the
    inventory declares none, and the file goes)."""
    from pi_dispatch.config.hostvars import LIMIT_FILES, installed_limit_file, limit_file_text

    files = []
    for role_var, name in LIMIT_FILES.items():
        path = installed_limit_file(host_vars, role_var)
        env_file = str(host_vars.get("pi_dispatch_worker_env_file"))
        declared = host_vars.get(f"pi_dispatch_worker_{role_var}")
        files.append({
            "name": role_var, "path": path or f"{env_file.rsplit('/', 1)[0]}/{name}",
            "content": limit_file_text(declared) if path else None,
        })  # fmt: skip
    return files


def pi_dispatch_daemon_json_with_runsc(current: str, flags: str) -> str:
    """Docker's daemon.json with runsc registered as the runsc runtime, the rest of it kept."""
    from pi_dispatch.core.runtimes import daemon_json_with_runsc

    try:
        return daemon_json_with_runsc(current, flags or "")
    except ValueError as error:
        raise AnsibleFilterError(str(error)) from error


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "pi_dispatch_env_file": pi_dispatch_env_file,
            "pi_dispatch_env_changes": pi_dispatch_env_changes,
            "pi_dispatch_worker_triggers_path": pi_dispatch_worker_triggers_path,
            "pi_dispatch_worker_app_key_path": pi_dispatch_worker_app_key_path,
            "pi_dispatch_egress_allowlist": pi_dispatch_egress_allowlist,
            "pi_dispatch_egress_profile_files": pi_dispatch_egress_profile_files,
            "pi_dispatch_daemon_json_with_runsc": pi_dispatch_daemon_json_with_runsc,
            "pi_dispatch_limit_files": pi_dispatch_limit_files,
        }
