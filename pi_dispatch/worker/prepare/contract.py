"""What a job's container is given, per the host's `PI_JOB_CONTRACT`, in three steps an attempt takes in order:
`admit` (the free gates, before the secrets), `prepare` (after the secrets, before any money), `spec`.

`reference`: the reference's contract, so the reference's `pi-job` image finds everything it reads: the image's
labels gate the job, its user is decided (`core/jobuser.py`), a key for its provider must be here; then its token,
its protected default branch, the clone, `.pi/`, `prompt.md` and `event.json` (`workspace.py`); then `/job`
read-only, `/workspace` read-write, `/outbox` for a local job, `/opt/pi-global` read-only, and the closed
environment of `core/jobenv.py`, the token last. `event`: this port's older contract for an image that runs no agent,
`/job/event.json` (the trigger) and `job.json`, nothing cloned.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from pi_dispatch.core.exitauth import image_capabilities
from pi_dispatch.core.jobenv import JobEnvironment
from pi_dispatch.core.jobs import QueuedJob
from pi_dispatch.worker.gates.agentgate import AgentGate, AgentPlan
from pi_dispatch.worker.gates.scripts import Refusal
from pi_dispatch.worker.prepare.jobdirs import write_job_dir
from pi_dispatch.worker.prepare.jobspec import ContainerSpec, ImageFacts, Launch, attempts_made, container_spec
from pi_dispatch.worker.prepare.workspace import Prepared, Preparer

if TYPE_CHECKING:
    from pi_dispatch.config.worker_settings import WorkerSettings

REFERENCE_CONTRACT: Final = "reference"  # PI_JOB_CONTRACT's default
SHM_MB: Final = 1024  # the reference's --shm-size=1g: a browser in the job needs it


@dataclass(frozen=True)
class Admitted:
    """A job its free gates let through: what its image declares, and (reference) its agent's plan."""

    capabilities: frozenset[str] | None
    plan: AgentPlan | None = None


@dataclass
class JobContract:
    """One host's contract with its job containers."""

    settings: WorkerSettings
    gate: AgentGate | None = None  # reference only
    preparer: Preparer | None = None  # reference only

    async def close(self) -> None:
        if self.preparer is not None:
            await self.preparer.close()

    def admit(self, job_id: str, data: Mapping[str, Any], facts: ImageFacts | None) -> Admitted | Refusal:
        """The free gates on the image's facts (`ImageFacts`, None when it is not here: the start will say)."""
        labels = facts.labels if facts is not None else None
        capabilities = image_capabilities(labels)
        if self.gate is None or facts is None:
            return Admitted(capabilities)
        plan = self.gate.admit(job_id, data, labels or {}, facts.user)
        return plan if isinstance(plan, Refusal) else Admitted(capabilities, plan)

    async def prepare(self, job_id: str, data: Mapping[str, Any], admitted: Admitted) -> Prepared | Refusal:
        """The job's folders (and token). Raises OSError when the jobs dir cannot be written (the host's fault),
        InfraRetry when a forge or git did not answer."""
        if self.preparer is None or admitted.plan is None:
            settings = self.settings
            job_dir = await asyncio.to_thread(write_job_dir, settings.jobs_dir, settings.worker_name, job_id, data)
            return Prepared(job_dir)
        return await self.preparer.prepare(job_id, data, admitted.plan.user)

    def spec(
        self,
        job: QueuedJob,
        launch: Launch,
        data: Mapping[str, Any],
        prepared: Prepared,
        admitted: Admitted,
        *,
        kept: bool,
    ) -> ContainerSpec:
        base = container_spec(self.settings, job, launch, data, prepared.job_dir, kept=kept)
        if self.gate is None or admitted.plan is None:
            return base
        plan, way = admitted.plan, launch.way
        environment = JobEnvironment(
            run=self.gate.run(plan, str(job.id), attempts_made(job) + 1, data),
            provider_keys=plan.provider_keys,
            secrets=launch.secrets,
            egress=way.environment() if way is not None else {},
            home=plan.user.home,
            spend=launch.spend,
            token=prepared.token,
            token_kind=prepared.token_kind,
            instance_url=prepared.instance_url,
        ).build()
        mounts: dict[str, tuple[Path, str]] = {}
        if prepared.workspace is not None:
            mounts["/workspace"] = (prepared.workspace, "rw")
        if prepared.outbox is not None:
            mounts["/outbox"] = (prepared.outbox, "rw")
        if self.settings.global_pi_dir is not None:
            mounts["/opt/pi-global"] = (self.settings.global_pi_dir, "ro")
        user = prepared.user or plan.user.user or self.settings.job_user
        masked = (*base.masked, *plan.provider_keys.values(), *([prepared.token] if prepared.token else []))
        return replace(base, environment=environment, user=user, mounts=mounts, shm_mb=SHM_MB, masked=masked)
