"""The reference's free gates for a job that runs an agent, before its secrets, its token or any money: what its
image can run (its labels), the user it can run as, a key for its provider, a place for a resumed session.

Each refusal is the reference's reason, decided from facts this host already has: the image's labels and user
(read once per job), this process's uid and gid, the Docker socket's group, and the provider keys this host holds.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from pi_dispatch.core.exitauth import image_capabilities
from pi_dispatch.core.imagegates import image_refusal
from pi_dispatch.core.jobenv import AgentRun
from pi_dispatch.core.jobuser import JobUser, job_user
from pi_dispatch.core.providers import key_candidates
from pi_dispatch.core.reasons import Reason
from pi_dispatch.infra.events import EventLog
from pi_dispatch.worker.gates.scripts import Refusal

if TYPE_CHECKING:
    from pi_dispatch.config.worker_settings import WorkerSettings

DOCKER_SOCKET: Final = Path("/var/run/docker.sock")


def socket_group(socket: Path = DOCKER_SOCKET) -> int | None:
    """The Docker socket's group: a job in it could drive the daemon."""
    with contextlib.suppress(OSError):
        return socket.stat().st_gid
    return None


@dataclass(frozen=True)
class AgentPlan:
    """What the gates decided for a job they let through: its user, its provider's keys, what its runner is told."""

    user: JobUser
    provider_keys: Mapping[str, str]
    provider: str
    model: str
    max_turns: int
    max_tokens: int | None


def _text(value: object, default: str) -> str:
    return value if isinstance(value, str) and value else default


def _whole(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


@dataclass
class AgentGate:
    """This host's facts for the agent's gates."""

    settings: WorkerSettings
    log: EventLog
    daemon: frozenset[str] = frozenset()  # the Docker daemon's security options (`infra/dockerclient.py`)
    euid: int = field(default_factory=os.geteuid)
    egid: int = field(default_factory=os.getegid)

    def __post_init__(self) -> None:
        self.docker_group = socket_group()

    def admit(
        self, job_id: str, data: Mapping[str, Any], labels: Mapping[str, str], image_user: str
    ) -> AgentPlan | Refusal:
        """The job's plan, or the first gate that refuses it."""
        if (refused := image_refusal(labels, data)) is not None:
            self.log(
                "job_image_refused", {"jobId": job_id, "reason": refused.reason, "declares": list(refused.declared)}
            )
            declared = ", ".join(refused.declared)
            return Refusal(refused.reason, words={"declared": declared, "forges": declared})
        capabilities = image_capabilities(dict(labels)) or frozenset()
        user = job_user(
            self.euid, self.egid, capabilities, image_user, socket_gid=self.docker_group, daemon=self.daemon
        )
        if isinstance(user, Reason):
            return Refusal(user)
        provider = _text(data.get("provider"), self.settings.provider)
        held = {name: secret.get_secret_value() for name, secret in self.settings.credentials.items()}
        keys = {name: held[name] for name in key_candidates(provider) if held.get(name)}
        if not keys:
            self.log("refused_provider_unconfigured", {"jobId": job_id, "provider": provider})
            return Refusal(Reason.PROVIDER_UNCONFIGURED)
        model = _text(data.get("model"), self.settings.model)
        if not model:
            self.log(
                "job_config_refused", {"jobId": job_id, "cause": "no model: the job names none and PI_MODEL is empty"}
            )
            return Refusal(Reason.CONFIG_REFUSED)
        if data.get("resume") is True:  # no transcript store on this port yet: PI_SESSIONS_DIR is never set
            return Refusal(Reason.SESSIONS_DIR_UNSET)
        return AgentPlan(
            user,
            keys,
            provider,
            model,
            _whole(data.get("maxTurns")) or self.settings.max_turns,
            _whole(data.get("maxTokens")),
        )

    def run(self, plan: AgentPlan, job_id: str, attempt: int, data: Mapping[str, Any]) -> AgentRun:
        """What the runner is told of this attempt."""
        excluded = data.get("excludeTools") if isinstance(data.get("excludeTools"), list) else []
        return AgentRun(
            provider=plan.provider,
            model=plan.model,
            max_turns=plan.max_turns,
            job_id=job_id,
            attempt=attempt,
            kind=str(data.get("kind") or ""),
            host=self.settings.worker_name,
            max_tokens=plan.max_tokens,
            flow=data.get("flow") if isinstance(data.get("flow"), str) else None,
            command=data.get("command") if isinstance(data.get("command"), str) else None,
            exclude_tools=tuple(item for item in excluded if isinstance(item, str))
            if isinstance(excluded, list)
            else (),
        )
