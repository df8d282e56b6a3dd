"""Jobs: the kinds, the delivery job id routing hashes, the semantic dedup id, the options, and what the worker
reads of a queued job.

Pure. Names and formats are the reference's, so a Node receiver and this one dedup the same delivery
to the same job and route it to the same host.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import Any, Final, Protocol

from pi_dispatch.core.errors import PiDispatchError
from pi_dispatch.core.exitauth import EXIT_AUTH_VARIABLE
from pi_dispatch.core.forges import FORGES
from pi_dispatch.core.jscompat import get, js_json, js_string, nullish

FORGE_PREFIX: Final = {kind: words.job_id_prefix for kind, words in FORGES.items()}
FORGE_KINDS: Final = frozenset(FORGES)
LOCAL_KIND: Final = "local"  # a cron job run on the host that scheduled it
JOB_KINDS: Final = FORGE_KINDS | {LOCAL_KIND}
# Variables the worker sets in every job container (a job may not bind a secret over them); PI_OFFLINE=1 is the
# reference's word to the runner that it may not fetch or update anything of its own.
JOB_VARIABLES: Final = ("PI_JOB_ID", "PI_JOB_ATTEMPT", "PI_JOB_KIND", "PI_HOST", "PI_OFFLINE")
# And those it sets for an image that declares it reads them: its cost cap, and where its exit line's key is
COST_CAP_VARIABLE: Final = "PI_MAX_COST_MICROS"
SPEND_VARIABLES: Final = (COST_CAP_VARIABLE, EXIT_AUTH_VARIABLE)
# And what the runtime sets in it: a binding over any of these would be overwritten.
CONTAINER_VARIABLES: Final = frozenset(
    {*JOB_VARIABLES, *SPEND_VARIABLES, "PATH", "HOME", "HOSTNAME", "USER", "TERM", "SHELL"}
)
# What a trigger fires on (`on.type`), as its jobs' records name it (`triggerType`).
TRIGGER_TYPES: Final = frozenset({"cron", "label", "comment", "pull_request", "issue"})
DEDUP_TTL_MS: Final = 600_000
RETENTION_S: Final = 31 * 24 * 3600
FORGE_JOB_OPTIONS: Final[Mapping[str, Any]] = {
    "attempts": 2,
    "backoff": {"type": "exponential", "delay": 60_000},
    "removeOnComplete": {"age": RETENTION_S},
    "removeOnFail": {"age": RETENTION_S},
}


def target_separator(kind: object, target_type: object) -> str:
    """`#` for issues everywhere; a pull request's is its forge's (`!` on GitLab and Azure, `#` elsewhere)."""
    words = FORGES.get(kind) if isinstance(kind, str) else None
    return words.pull_request_separator if target_type == "pull_request" and words is not None else "#"


class JobIdError(PiDispatchError):
    """A delivery that cannot be given a job id."""


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def forge_delivery_job_id(kind: str, delivery_id: object, replica: object = None) -> str:
    """`<prefix><delivery id>[-r<replica>]`, the id a forge job is enqueued (and routed) under."""
    prefix = FORGE_PREFIX.get(kind)
    if prefix is None:
        raise JobIdError(f"kind {kind!r}: not a forge; use one of {', '.join(FORGE_PREFIX)}")
    if nullish(delivery_id) or js_string(delivery_id) == "":
        raise JobIdError(f"{kind} delivery: no {FORGES[kind].delivery_id}; the forge must send one")
    job_id = prefix + js_string(delivery_id)
    if nullish(replica):
        return job_id
    if not _positive_int(replica):
        raise JobIdError(f"replica {replica!r}: must be a positive integer")
    return f"{job_id}-r{replica}"


# The action that closes a pull request, in each forge's own words (Azure has none the payload can show).
PR_CLOSE_ACTION: Final[Mapping[str, str]] = {
    kind: words.pr_close for kind, words in FORGES.items() if words.pr_close is not None
}
_PR_CLOSE_WORDS: Final = frozenset(PR_CLOSE_ACTION.values())


def semantic_dedup_id(kind: str, job: Mapping[str, Any]) -> str:
    """`<repo><sep><number>:[closed:]<flow | cmd:<command>>[:r<replica>]`: one live job per target and flow."""
    target = get(job, "target")
    matched = get(get(job, "trigger"), "matched")
    matched_type = get(matched, "type")
    action = get(matched, "action")
    closing = matched_type == "issue" or (
        matched_type == "pull_request" and isinstance(action, str) and action in _PR_CLOSE_WORDS
    )
    command = get(job, "command")
    slot = f"cmd:{js_string(command)}" if isinstance(command, str) and command else js_string(get(job, "flow"))
    dedup = (
        f"{js_string(get(job, 'repo'))}{target_separator(kind, get(target, 'type'))}{js_string(get(target, 'number'))}"
        f":{'closed:' if closing else ''}{slot}"
    )
    replica = get(job, "replica")
    return f"{dedup}:r{replica}" if _positive_int(replica) else dedup


# A forge job's data keys after `kind`, in the reference's order. Listed rather than copied wholesale: the data
# is durable and its `trigger` reaches the container, so a field nobody reviewed has no business in it.
FORGE_DATA_KEYS: Final = (
    "repo",
    "projectId",
    "azure",
    "target",
    "flow",
    "command",
    "trigger",
    "provider",
    "model",
    "maxTurns",
    "models",
    "maxCostUsd",
    "packages",
    "image",
    "backend",
    "excludeTools",
    "skillsDir",
    "instructions",
    "resume",
    "secrets",
    "secretsProfile",
    "waitFor",
    "replica",
    "replicas",
)


def forge_job_data(kind: str, job: Mapping[str, Any]) -> dict[str, Any]:
    """The data a forge job is stored with: its kind, then each known field the job carries."""
    return {"kind": kind} | {key: job[key] for key in FORGE_DATA_KEYS if key in job}


class QueuedJob(Protocol):
    """What the worker reads and does of a BullMQ job. Its data is untrusted: each use checks what it reads."""

    id: str | None
    name: str
    data: Any
    opts: dict[str, Any]
    attemptsMade: int

    def moveToDelayed(self, timestamp: int, token: str | None = None) -> Awaitable[Any]: ...

    def updateData(self, data: Any) -> Awaitable[Any]: ...

    def updateProgress(self, progress: Any) -> Awaitable[Any]: ...


# A local job's options: the reference keeps a finished one a day, a failed one a week
LOCAL_JOB_OPTIONS: Final[Mapping[str, Any]] = {
    "attempts": 2,
    "backoff": {"type": "exponential", "delay": 60_000},
    "removeOnComplete": {"age": 86_400},
    "removeOnFail": {"age": 604_800},
}


def local_job_id(job: Mapping[str, Any], minute: str) -> str:
    """`local-<16 hex>`: the SHA-256 of the folder, flow (or command), task and the minute (`YYYY-MM-DDTHH:MM`),
    NUL-joined, with provider, model and models when the job names any, as the reference ids a local job."""
    import hashlib

    parts = [str(job.get("folder") or ""), str(job.get("flow") or job.get("command") or ""), str(job.get("task") or "")]
    parts.append(minute[:16])
    if any(job.get(key) is not None for key in ("provider", "model", "models")):
        models = job.get("models")
        parts += [str(job.get("provider") or ""), str(job.get("model") or ""), js_json(models) if models else ""]
    return "local-" + hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]
