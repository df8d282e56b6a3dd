"""What a job image's labels say it can run, and the job a label refuses before anything is spent, as the
reference reads them: `dev.pi-dispatch.forges` excludes (absent: every forge), `dev.pi-dispatch.capabilities`
includes (absent: nothing), and a job that needs what its image does not declare is refused, first match wins.

The cost cap's gate (`costCap`) is the dollar reserve's (`worker/gates/spend.py`), which knows the job's cap. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from pi_dispatch.core.exitauth import CAPABILITIES_LABEL
from pi_dispatch.core.jobs import LOCAL_KIND
from pi_dispatch.core.reasons import Reason

FORGES_LABEL: Final = "dev.pi-dispatch.forges"
PI_VERSION_LABEL: Final = "dev.pi-dispatch.pi-version"
ANY_UID: Final = "anyUid"
# A capability a job needs, and the job field that needs it (present: needed), first match wins
CAPABILITY_GATES: Final = (
    ("replicas", "replica", Reason.JOB_IMAGE_REPLICAS_UNSUPPORTED),
    ("commands", "command", Reason.JOB_IMAGE_COMMANDS_UNSUPPORTED),
    ("excludeTools", "excludeTools", Reason.JOB_IMAGE_EXCLUDE_TOOLS_UNSUPPORTED),
)
MODEL_POLICY: Final = "modelPolicy"


def label_list(labels: Mapping[str, str] | None, name: str) -> tuple[str, ...] | None:
    """A comma-list label, trimmed, empties dropped; None when absent or empty."""
    value = labels.get(name) if labels is not None else None
    if not isinstance(value, str) or value == "<no value>":
        return None
    items = tuple(item.strip() for item in value.split(",") if item.strip())
    return items or None


@dataclass(frozen=True)
class ImageRefusal:
    """A job its image cannot run: the reason, and what the image declares (for the forge's comment)."""

    reason: Reason
    declared: tuple[str, ...] = ()


def image_refusal(labels: Mapping[str, str] | None, job: Mapping[str, Any]) -> ImageRefusal | None:
    """The refusal of a job its image's labels say it cannot run, or None."""
    kind = job.get("kind")
    forges = label_list(labels, FORGES_LABEL)
    if forges is not None and kind != LOCAL_KIND and kind not in forges:
        return ImageRefusal(Reason.JOB_IMAGE_FORGE_UNSUPPORTED, forges)
    declared = label_list(labels, CAPABILITIES_LABEL) or ()
    for capability, field, reason in CAPABILITY_GATES:
        if job.get(field) is not None and capability not in declared:
            return ImageRefusal(reason, declared)
    models = job.get("models")
    if isinstance(models, list) and models and MODEL_POLICY not in declared:
        return ImageRefusal(Reason.JOB_IMAGE_MODEL_POLICY_UNSUPPORTED, declared)
    return None
