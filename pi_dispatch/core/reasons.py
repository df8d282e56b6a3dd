"""Every reason a run can end with, every outcome, the exit-code protocol, and the one builder of a job's result.

The reasons are the reference's fixed enum (run records carry nothing else, so no text from a job's payload
ever reaches one). The run-record allowlist, the audit, the worker's gates and the docs' reason table all
read `Reason`. Pure.
"""

from __future__ import annotations

from enum import IntEnum, StrEnum
from typing import Final


class Reason(StrEnum):
    """Why a run was refused, held past its limits, or failed."""

    # the secret gate (a profile's resolver)
    SECRET_PROFILE_UNKNOWN = "secret-profile-unknown"
    SECRET_PROFILE_AMBIGUOUS = "secret-profile-ambiguous"
    SECRET_NAME_RESERVED = "secret-name-reserved"
    SECRET_UNRESOLVED = "secret-unresolved"
    SECRET_RESOLVER_UNREACHABLE = "secret-resolver-unreachable"
    # this port's own: a reference that could read as an option or hold a control character, too many bindings
    SECRET_REFERENCE_INVALID = "secret-reference-invalid"
    SECRET_BINDINGS_TOO_MANY = "secret-bindings-too-many"
    # the wait gate (a profile's check, an `after` instant)
    WAIT_REFUSED = "wait-refused"
    WAIT_EXPIRED = "wait-expired"
    WAIT_UNANSWERABLE = "wait-unanswerable"
    WAIT_PROFILE_UNKNOWN = "wait-profile-unknown"
    WAIT_SUPERSEDED = "wait-superseded"
    WAIT_SKEW = "wait-skew"
    WAIT_UNREADABLE = "wait-unreadable"
    WAIT_AFTER_BEYOND_MAX = "wait-after-beyond-max"
    # this port's own: a target that would reach a check script as an option or with control characters
    JOB_TARGET_INVALID = "job-target-invalid"
    # the reference's runner policies, kept so a Node worker's records read back unchanged
    WORKER_ABORT = "worker-abort"  # the worker ended the run (its time limit, a shutdown): what this port records too
    OPERATOR_CANCEL = "operator-cancel"  # an operator cancelled it (`pi-dispatch cancel`, the console); never retried
    OVER_BUDGET = "over-budget"
    UNPROTECTED_BRANCH = "unprotected-branch"
    RUNNER_POLICY = "runner-policy"
    EGRESS_PROXY_MISSING = "egress-proxy-missing"
    EGRESS_PROXY_STOPPED = "egress-proxy-stopped"
    # the limits the fleet shares with Node hosts (`worker/gates/limits.py`): a window's cap, its hold band, a scope's
    # cap, the day's tokens; and those only current Node hosts write (dollars, projects, the allocation envelope, the
    # runner's own policies), known so their records read back as what they say
    SOFT_HOLD = "soft-hold"
    SCOPE_CAP = "scope-cap"
    DAILY_TOKEN_CAP = "daily-token-cap"
    PROJECT_CAP = "project-cap"
    DOLLAR_CAP = "dollar-cap"
    ALLOCATION_CAP = "allocation-cap"
    CONFIG_REFUSED = "config-refused"
    COST_CAP = "cost-cap"
    COST_CAP_UNENFORCEABLE = "cost-cap-unenforceable"
    JOB_IMAGE_COST_CAP_UNSUPPORTED = "job-image-cost-cap-unsupported"
    NETNS_KEEPER_NOT_HOLDING = "netns-keeper-not-holding"
    PROVIDER_AUTH_REFUSED = "provider-auth-refused"
    MODEL_NOT_ALLOWED = "model-not-allowed"
    MODEL_POLICY_UNENFORCEABLE = "model-policy-unenforceable"
    # this port's own: the job binds profiles whose egress allowlists differ (PI_EGRESS_PROFILES), never retried
    EGRESS_PROFILES_DIFFER = "egress-profiles-differ"
    # preparing a forge or local job as the reference does (`worker/prepare/`): its commit gone from the forge, its
    # `.pi/` past a cap, its local folder no repository, its image unable to run what it asks for
    SHA_GONE = "sha-gone"
    PI_TOO_MANY_FILES = "pi-too-many-files"
    PI_FILE_TOO_LARGE = "pi-file-too-large"
    PI_TOO_LARGE = "pi-too-large"
    PI_PATH_COLLISION = "pi-path-collision"
    LOCAL_FOLDER_NOT_A_REPO = "local-folder-not-a-repo"
    LOCAL_FOLDER_NO_COMMIT = "local-folder-no-commit"
    LOCAL_FOLDER_UNREADABLE_REPO = "local-folder-unreadable-repo"
    JOB_IMAGE_FORGE_UNSUPPORTED = "job-image-forge-unsupported"
    JOB_IMAGE_REPLICAS_UNSUPPORTED = "job-image-replicas-unsupported"
    JOB_IMAGE_COMMANDS_UNSUPPORTED = "job-image-commands-unsupported"
    JOB_IMAGE_EXCLUDE_TOOLS_UNSUPPORTED = "job-image-exclude-tools-unsupported"
    JOB_IMAGE_MODEL_POLICY_UNSUPPORTED = "job-image-model-policy-unsupported"
    SESSIONS_DIR_UNSET = "sessions-dir-unset"
    JOB_USER_UNMAPPABLE = "job-user-unmappable"
    JOB_IMAGE_ANY_UID_UNSUPPORTED = "job-image-any-uid-unsupported"
    PROVIDER_UNCONFIGURED = "provider-unconfigured"
    # the job's container
    JOB_IMAGE_MISSING = "job-image-missing"
    # this port's own: the job binds a profile whose runtime (runsc) failed this host's boot canary, never retried
    JOB_RUNTIME_UNAVAILABLE = "job-runtime-unavailable"
    # this port's own: an image the host does not allow (PI_ALLOWED_IMAGES), a job larger or deeper than allowed
    JOB_IMAGE_NOT_ALLOWED = "job-image-not-allowed"
    JOB_TOO_LARGE = "job-too-large"
    JOB_TOO_DEEP = "job-too-deep"
    JOB_UNREADABLE = "job-unreadable"
    # this port's own: the job's stored data is gone (evicted by a store that evicts, or deleted): never run empty
    JOB_DATA_MISSING = "job-data-missing"
    JOB_TIMEOUT = "job-timeout"  # an older Python host's word for worker-abort (its time limit), still read
    # this port's own: the kernel killed the job for passing its memory limit (PI_JOB_MEMORY_MB); never retried
    JOB_OOM_KILLED = "job-oom-killed"
    CONTAINER_FAILED = "container-failed"
    CONTAINER_POLICY = "container-policy"
    INFRA = "infra"
    # this port's own: the worker could no longer prove it held the job's lock, and killed its container
    LOCK_LOST = "lock-lost"
    # this port's own: the job's workers died with it more often than MAX_STALLS (BullMQ failed it unrun)
    JOB_STALLED = "job-stalled"
    # an older Python host's word for operator-cancel, still read
    CANCELLED = "cancelled"


REASONS: Final = frozenset(Reason)
WAIT_REASONS: Final = frozenset(reason for reason in Reason if reason.startswith("wait-"))


class Outcome(StrEnum):
    """How a run ended, as its record and its BullMQ return value say."""

    COMPLETED = "completed"
    POLICY = "policy"  # refused, returned rather than thrown: never retried
    FAILED = "failed"  # thrown: retried while attempts remain


class ExitCode(IntEnum):
    """The reference's exit-code protocol, shared by job containers, wait checks and secret resolvers."""

    OK = 0  # a container completed; a check says go
    INFRA = 1  # worth another attempt
    POLICY = 2  # a determinate refusal: never retried
    HOLD = 3  # a check says not yet


def job_result(outcome: Outcome, reason: Reason | None = None, exit_code: int | None = None) -> dict[str, object]:
    """A job's BullMQ return value, in the reference's shape (telemetry fields stay empty: no agent ran here)."""
    return {
        "outcome": str(outcome),
        "reason": None if reason is None else str(reason),
        "exitCode": exit_code,
        "turns": None,
        "tokens": None,
        "budgetReserved": False,
    }
