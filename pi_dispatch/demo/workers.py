"""The demo's workers: each inventory host's rendered env pointed at this machine (the demo's store, its folders,
local copies of its scripts), and their processes stopped together, whatever ends the demo."""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from pi_dispatch.config.hostvars import EGRESS_PROFILES_DIR, LIMIT_FILES, InventoryHost, env_values, limit_file_text
from pi_dispatch.core.egress import allowlist_text
from pi_dispatch.core.profiles import VARIABLE, ProfileKind, render_profiles
from pi_dispatch.demo.store import free_port
from pi_dispatch.fleet.hosts import FleetHost
from pi_dispatch.infra.store import STORE_VARIABLES

STOP_TIMEOUT_S: Final = 30.0


@dataclass
class DemoWorker:
    host: InventoryHost
    fleet_host: FleetHost
    env: dict[str, str]
    hostname: str
    process: subprocess.Popen[bytes] | None = None

    @property
    def name(self) -> str:
        return self.fleet_host.worker_name

    @property
    def logs_dir(self) -> Path:
        return Path(self.env["PI_LOGS_DIR"])


def _script_source(host: InventoryHost, destination: str) -> Path | None:
    scripts = host.declared("scripts") or {}
    source = scripts.get(destination) if isinstance(scripts, Mapping) else None
    return host.controller_file(source) if isinstance(source, str) else None


def _local_profiles(host: InventoryHost, folder: Path, kind: ProfileKind) -> str:
    """The host's profile table with each script copied into folder, in the env grammar."""
    table = host.secret_profiles if kind == "secret" else host.wait_profiles
    local_table = {}
    for name, destination in table.items():
        source = _script_source(host, destination)
        local = folder / Path(destination).name
        if source is not None and source.is_file() and not local.exists():
            shutil.copyfile(source, local)
            local.chmod(0o755)
        local_table[name] = str(local)
    return render_profiles(local_table)


def _local_lists(host: InventoryHost, folder: Path) -> str:
    """The host's profile allowlists written into folder, as the role writes them beside the env file."""
    declared = host.declared("egress_profiles") or {}
    folder.mkdir(exist_ok=True)
    local_table = {}
    for name, entries in declared.items():
        local = folder / f"{name}.conf"
        local.write_text(allowlist_text(entries, f"pi_dispatch_worker_egress_profiles.{name}"))
        local_table[str(name)] = str(local)
    return render_profiles(local_table)


def worker_environment(
    host: InventoryHost, url: str, state: Path, hostname: str, egress: Mapping[str, str]
) -> tuple[dict[str, str], FleetHost]:
    """The host's rendered env, pointed at the demo's Valkey (whatever store the inventory names), folders, local
    copies of its scripts and the demo's egress proxy (`egress.py`), unless the host turns egress off."""
    env = {name: value for name, value in env_values(host.vars).items() if name not in STORE_VARIABLES}
    env.pop(
        "PI_JOB_NETWORK", None
    )  # the role's network is the host's: the demo's jobs use its own, or Docker's default
    env.update(egress if env.get("PI_EGRESS") != "0" else {})
    folder = state / host.name
    (folder / "profiles").mkdir(parents=True, exist_ok=True)
    for kind in ("secret", "wait"):
        if VARIABLE[kind] in env:
            env[VARIABLE[kind]] = _local_profiles(host, folder / "profiles", kind)
    if VARIABLE["egress"] in env:
        env[VARIABLE["egress"]] = _local_lists(host, folder / EGRESS_PROFILES_DIR)
    env.update(
        VALKEY_URL=url,
        PI_LOGS_DIR=str(folder / "logs"),
        PI_JOBS_DIR=str(folder / "jobs"),
        PI_DRAIN_GRACE_MS="5000",
        PI_METRICS_ADDR=f"127.0.0.1:{free_port()}",  # the hosts share this machine, so not one default port
        EXAMPLE_SECRETS_DIR=str(state / "secrets"),
        EXAMPLE_FLAGS_DIR=str(state / "flags"),
        PI_SCRIPT_ENV="EXAMPLE_SECRETS_DIR,EXAMPLE_FLAGS_DIR",  # a script gets only what its host hands it
    )
    if (source := host.triggers_source) is not None:  # its own copy, as the role installs one beside the env file
        env["PI_TRIGGERS_FILE"] = str(shutil.copyfile(source, folder / "triggers.json"))
    for role_var, variable in (("scoped_limits", "PI_SCOPED_LIMITS_FILE"), ("pause_windows", "PI_PAUSE_WINDOWS_FILE")):
        if variable in env:  # the fleet's limit files, written as the role writes them
            written = folder / LIMIT_FILES[role_var]
            written.write_text(limit_file_text(host.declared(role_var)))
            env[variable] = str(written)
    return env, FleetHost.of_inventory(host, hostname)


@contextlib.contextmanager
def workers_stopped(workers: list[DemoWorker]) -> Iterator[None]:
    try:
        yield
    finally:
        running = [w.process for w in workers if w.process is not None and w.process.poll() is None]
        for process in running:
            process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for process in running:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
