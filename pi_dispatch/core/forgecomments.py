"""The one comment a forge job's issue or pull request gets when its run is refused or stops, in the reference's
fixed words, so a thread reads the same whichever host took the job. A completed run gets none (the agent posts its
own status); neither does a refusal of the job's preparation (`sha-gone`, `.pi/` caps, a local folder), nor an
attempt that will be retried: only the final failure says so.

The words are fixed: what fills a placeholder is this host's own (an image name, a window, a number), never the
job's text. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from pi_dispatch.core.reasons import Reason

DECLARED: Final = "declared"  # the words' key for what an image declares (`declares: a, b` or `is absent`)

_IMAGE_CAPABILITY: Final = (
    'Refused: the job image "{image}" does not declare {what} support (`dev.pi-dispatch.capabilities` {declared}), '
    "so {because}. Rebuild the image from a version that has this feature. Not run."
)
TEXTS: Final[Mapping[Reason, str]] = {
    Reason.JOB_IMAGE_MISSING: 'Refused: the job image "{image}" is not present on the worker host. Not run.',
    Reason.JOB_IMAGE_FORGE_UNSUPPORTED: (
        'Refused: the job image "{image}" does not support {kind} jobs (it declares: {forges}). Set this '
        "trigger's `run.image` to an image that does. Not run."
    ),
    Reason.JOB_IMAGE_REPLICAS_UNSUPPORTED: _IMAGE_CAPABILITY.replace("{what}", "replica").replace(
        "{because}", "its baked guardrails would name the wrong branch"
    ),
    Reason.JOB_IMAGE_COMMANDS_UNSUPPORTED: _IMAGE_CAPABILITY.replace("{what}", "command").replace(
        "{because}", "its runner would not dispatch `run.command`"
    ),
    Reason.JOB_IMAGE_EXCLUDE_TOOLS_UNSUPPORTED: _IMAGE_CAPABILITY.replace("{what}", "exclude-tools").replace(
        "{because}", "its runner would ignore `run.excludeTools` and run this trigger with every tool it says to remove"
    ),
    Reason.JOB_IMAGE_MODEL_POLICY_UNSUPPORTED: _IMAGE_CAPABILITY.replace("{what}", "allowed-model").replace(
        "{because}", "its runner cannot hold this job to the models it may use"
    ),
    Reason.JOB_IMAGE_COST_CAP_UNSUPPORTED: _IMAGE_CAPABILITY.replace("{what}", "cost-cap").replace(
        "{because}", "its runner would ignore the per-job dollar cap and run this job with no cap at all"
    ),
    Reason.JOB_USER_UNMAPPABLE: (
        "Refused: the worker host's container runtime cannot give this job a non-root user that can read and write "
        "its own files. Not run."
    ),
    Reason.JOB_IMAGE_ANY_UID_UNSUPPORTED: (
        'Refused: the job image "{image}" does not declare `anyUid` (`dev.pi-dispatch.capabilities`), so it cannot '
        "run as this worker's own uid, which this host's container runtime requires. Rebuild the image from a "
        "version that has this feature. Not run."
    ),
    Reason.PROVIDER_UNCONFIGURED: (
        'Refused: this deployment has no usable credential for the "{provider}" provider, so no container was '
        "started and nothing was spent. Ask the operator to run `pi-dispatch doctor`. Not run."
    ),
    Reason.SESSIONS_DIR_UNSET: (
        "Refused: this trigger set `run.resume` but PI_SESSIONS_DIR is unset, so there is nowhere to persist the "
        "transcript -- the job would run with no session and still report success. Set PI_SESSIONS_DIR to a "
        "private directory outside every repo, or drop `run.resume` from this trigger. Not run."
    ),
    Reason.SECRET_PROFILE_UNKNOWN: (
        "Refused: this trigger set `run.secrets`, and the resolver profile it names is not usable on this worker "
        "host. No profile of that name is declared, or its resolver is absent or not executable. The job would have "
        "started with those variables unset, and an agent that gets a 401 writes a plausible report and exits 0. "
        "Run `pi-dispatch doctor` on the worker to see which profiles it has. Not run."
    ),
    Reason.SECRET_PROFILE_AMBIGUOUS: (
        "Refused: this trigger set `run.secrets`, and the resolver profile it names is declared twice on this "
        "worker host, once in the environment and once in the settings overlay. Neither wins, on purpose: the job "
        "would otherwise run against whichever one happened to be picked. Remove one of the two. Not run."
    ),
    Reason.SECRET_NAME_RESERVED: (
        "Refused: this trigger's `run.secrets` binds a variable this deployment already uses for the job's own "
        "credentials. Whichever of the two values reached the container, one of them would be silently ignored. "
        "Rename it in the triggers file. Not run."
    ),
    Reason.SECRET_UNRESOLVED: (
        "Refused: this trigger set `run.secrets`, and the resolver did not return a value. The job would have "
        "started with that variable unset, and an agent that gets a 401 writes a plausible report and exits 0. Run "
        "your profile's resolver by hand against that reference to see why: this comment carries neither the "
        "reference, nor the resolver's path, nor a byte of what it printed. Not run."
    ),
    Reason.UNPROTECTED_BRANCH: "Refused: the default branch is not protected. See SECURITY.md.",
    Reason.EGRESS_PROXY_MISSING: (
        "Refused: this deployment runs jobs behind an egress policy and its allowlist proxy is not on this host, so "
        "the job could not reach the provider and would burn its budget slot proving it. Start it, or set "
        "PI_EGRESS=0 to run without an egress policy. Not run."
    ),
    Reason.DAILY_TOKEN_CAP: "Over the daily token cap ({spent}/{cap} tokens). Not run.",
    Reason.SCOPE_CAP: "Over the {window} run cap for {scope} ({cap}). Not run.",
    Reason.SOFT_HOLD: (
        "Soft-hold: {window} spend {reserved}/{cap} is inside the {pct}% hold band. New starts paused; not run."
    ),
    Reason.OVER_BUDGET: "Over the {window} budget cap ({cap}). Not run.",
    Reason.CONFIG_REFUSED: (
        "Refused: this deployment is misconfigured, so the job could not be started. Ask the operator to run "
        "`pi-dispatch doctor`. Not run."
    ),
    Reason.WORKER_ABORT: (
        "Stopped: the worker ended this run before it finished (the 30-minute job limit, or a worker shutdown). "
        "Partial work may exist. Not retried."
    ),
    Reason.OPERATOR_CANCEL: "Stopped: the operator cancelled this run. Partial work may exist. Not retried.",
    Reason.RUNNER_POLICY: (
        "Stopped: the run ended inside the container before finishing (a turn or token budget, or an in-container "
        "configuration refusal). Partial work may exist. Not retried."
    ),
    Reason.PROVIDER_AUTH_REFUSED: (
        "Stopped: the AI provider refused this worker's credentials or access (an authentication or permission "
        "error). The operator needs to check the provider key and what it is allowed to use. Not retried."
    ),
    Reason.COST_CAP: (
        "Stopped: the next AI call could have taken this run past its cost limit, so it was not made. Partial work "
        "may exist. Not retried."
    ),
    Reason.COST_CAP_UNENFORCEABLE: (
        "Stopped: this run has a cost limit, and the job image could not enforce it before each AI call, so nothing "
        "was sent to the AI provider. The operator needs to update the job image. Not retried."
    ),
    Reason.MODEL_POLICY_UNENFORCEABLE: (
        "Stopped: this run is limited to certain AI models, and the job image could not enforce that before each AI "
        "call, so nothing was sent to the AI provider. The operator needs to update the job image. Not retried."
    ),
}
FINAL_FAILURE: Final = (
    "Failed: an error stopped this job and it will not be retried further. Ask the operator to check the worker log."
)


def comment_text(reason: str | None, words: Mapping[str, object] | None = None) -> str | None:
    """The comment for a refused or stopped run; None for one the reference does not comment on."""
    try:
        template = TEXTS.get(Reason(reason)) if reason is not None else None
    except ValueError:
        return None
    if template is None:
        return None
    filled = {name: str(value) for name, value in (words or {}).items()}
    declared = filled.get(DECLARED)
    filled[DECLARED] = f"declares: {declared}" if declared else "is absent"
    try:
        return template.format_map(filled)
    except KeyError:  # a placeholder this host did not fill: the reference's words with it said plainly
        return template.format_map(_Plain(filled))


class _Plain(dict[str, str]):
    def __missing__(self, name: str) -> str:
        return f"(its {name})"
