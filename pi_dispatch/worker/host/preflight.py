"""`config check --live`: whether this host can serve with these settings, asked of the real services as the worker
would ask them (as `gitlab-runner verify` does): the store answers and takes the password, the Docker daemon answers,
the job image is here, the egress proxy answers (with PI_EGRESS on), every resolver and check script is a file this
user may execute, and the logs and jobs folders take a file. Run it as the worker's user (the role does), so the
answers are the worker's.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pi_dispatch.infra.dockerclient import DockerUnreachable, docker_client
from pi_dispatch.infra.store import store_of
from pi_dispatch.infra.valkey import STORE_FAULTS, bounded, describe
from pi_dispatch.worker.gates.scripts import usable_script

if TYPE_CHECKING:
    from pi_dispatch.config.worker_settings import WorkerSettings
    from pi_dispatch.core.egressprofiles import EgressPlan

CHECK_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Check:
    """One thing the worker needs, and whether this host has it (`detail` says what was found, or what to fix)."""

    name: str
    ok: bool
    detail: str

    def as_json(self) -> dict[str, object]:
        return {"check": self.name, "ok": self.ok, "detail": self.detail}


async def _store(settings: WorkerSettings) -> list[Check]:
    store = store_of(settings)
    client = store.client(CHECK_TIMEOUT_S)
    try:
        await bounded(client.ping(), CHECK_TIMEOUT_S)
        spend = await _spend(settings, client)
    except STORE_FAULTS as error:  # any refusal (auth, Sentinel, network) is this check's answer
        return [Check("store", False, f"{store.shown()} did not answer ({describe(error)}); fix: VALKEY_* settings")]
    finally:
        await client.aclose()
    return [Check("store", True, f"{store.shown()} answered"), *spend]


async def _spend(settings: WorkerSettings, client: Any) -> list[Check]:
    """Whether the live hosts cap dollars as this one would (a warning, never a refusal, as a Node doctor's)."""
    from pi_dispatch.core.dollarplan import FPUSD_ROW_FIELD, host_usd_fingerprint, spend_groups
    from pi_dispatch.core.errors import ConfigError
    from pi_dispatch.fleet.snapshot import registry_now
    from pi_dispatch.worker.gates.limits import read_limit_files

    try:
        scoped, _ = read_limit_files(settings, present_only=True)
    except ConfigError:  # said by the check itself, before this
        return []
    mine = host_usd_fingerprint(settings.max_cost_usd, settings.dollar_caps, scoped)
    said = {
        str(row.get("name")): row.get(FPUSD_ROW_FIELD) or None
        for row in getattr(await registry_now(client), "hosts", [])
        if row.get("name") != settings.worker_name
    }
    groups = spend_groups({**said, "(this host)": mine})
    if not groups:
        return [Check("dollar caps", True, f"the live hosts cap dollars as this one does (fpUsd {mine})")]
    differ = "; ".join(f"{', '.join(names)}: {fingerprint}" for fingerprint, names in groups.items())
    fix = "declare the dollar caps and rows once for every worker (group_vars)"
    return [Check("dollar caps", True, f"warning: hosts cap dollars differently ({differ}); fix: {fix}")]


def _docker(image: str) -> list[Check]:
    import docker
    import requests.exceptions

    failures = (docker.errors.DockerException, requests.exceptions.RequestException)
    try:
        client = docker_client(int(CHECK_TIMEOUT_S))
    except DockerUnreachable as unreachable:
        return [Check("docker", False, f"{unreachable}; fix: start Docker, or set DOCKER_HOST")]
    try:
        try:
            client.images.get(image)
        except failures as error:
            missing = Check("job image", False, f"{image} is not here ({type(error).__name__}); fix: build or pull it")
            return [Check("docker", True, "the daemon answered"), missing]
        return [Check("docker", True, "the daemon answered"), Check("job image", True, f"{image} is here")]
    finally:
        client.close()


def _scripts(settings: WorkerSettings) -> list[Check]:
    found = []
    profiles = [("secret", settings.secret_profiles), ("wait", settings.wait_profiles)]
    for kind, table in profiles:
        for profile, path in sorted(table.items()):
            name = f"{kind} profile {profile}"
            real = usable_script(path)
            if real is None:
                found.append(Check(name, False, f"{path} is not an executable file; fix: install it, mode 0755"))
            elif not os.access(real, os.X_OK):
                found.append(Check(name, False, f"{path} may not be executed by this user; fix: its mode or owner"))
            else:
                found.append(Check(name, True, f"{path} is executable"))
    return found


def _folder(name: str, folder: Path) -> Check:
    existing = next((candidate for candidate in (folder, *folder.parents) if candidate.exists()), Path("/"))
    if existing != folder:  # the worker creates it: its nearest existing parent must take a folder
        ok = os.access(existing, os.W_OK | os.X_OK)
        detail = f"{folder} does not exist and {existing} " + ("takes it" if ok else "does not take it")
        return Check(name, ok, detail + ("" if ok else "; fix: create it, owned by the worker's user"))
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".pi-dispatch-check-"):
            pass
    except OSError as error:
        return Check(name, False, f"{folder} takes no file ({error.strerror}); fix: its owner, mode or free space")
    return Check(name, True, f"{folder} takes a file")


async def _egress(networks: tuple[str, ...]) -> Check:
    """Each egress network there, internal, and its proxy answering, as the worker's gate finds them."""

    from pi_dispatch.worker.gates.egressgate import EgressGate

    try:
        client = await asyncio.to_thread(docker_client, int(CHECK_TIMEOUT_S))
    except DockerUnreachable as unreachable:
        return Check("egress proxy", False, f"no Docker daemon to ask ({unreachable}); fix: start Docker")
    try:
        fault = await EgressGate(client, networks, Path("/nonexistent")).fault()
    finally:
        client.close()
    if fault is not None:
        return Check("egress proxy", False, fault)
    return Check("egress proxy", True, f"it answers on the gateway of {', '.join(networks)}")


async def live_checks(settings: WorkerSettings, plan: EgressPlan) -> list[Check]:
    """Every check, in the order the worker needs them; each bounded, none raises."""
    store, docker_found = await asyncio.gather(_store(settings), asyncio.to_thread(_docker, settings.job_image))
    folders = [_folder("logs dir", settings.logs_dir), _folder("jobs dir", settings.jobs_dir)]
    egress = [await _egress(plan.network_names())] if settings.egress_network is not None else []
    return [*store, *docker_found, *egress, *_scripts(settings), *folders]
