"""`/job/event.json`, as the reference writes it: a forge job's subset of its delivery, or a local job's source.

Two-space JSON with no trailing newline, keys in the reference's order, a key with no value left out. A forge
job's carries the delivery's facts (event, action, delivery id, repository, the target, the comment or review that
invoked it, the sender's id, the rule that matched) and never a header, a signature or a token. A local job's
names its folder by its last segment only, never its path. Pure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from pi_dispatch.core.jscompat import mapping_at

# A pull request target's fields that reach event.json, in order
PULL_FIELDS: Final = ("number", "title", "body", "head", "base")
ISSUE_FIELDS: Final = ("number", "title", "body")
COMMENT_FIELDS: Final = ("body", "author_association")
REVIEW_FIELDS: Final = ("id", "body", "state", "author_association")


def event_text(event: Mapping[str, Any]) -> str:
    """`JSON.stringify(event, null, 2)`."""
    return json.dumps(event, indent=2, ensure_ascii=False)


def _picked(source: object, names: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(source, Mapping):
        return {}
    return {name: source[name] for name in names if name in source}


def forge_event(job: Mapping[str, Any]) -> dict[str, Any]:
    """A forge job's event.json: what its trigger says about the delivery, in the reference's order."""
    trigger, target = mapping_at(job, "trigger"), mapping_at(job, "target")
    event: dict[str, Any] = {
        "event": trigger.get("event"),
        "action": trigger.get("action"),
        "delivery": trigger.get("deliveryId"),
        "repository": {"full_name": job.get("repo")},
    }
    if target.get("type") == "pull_request":
        event["pull_request"] = _picked(target, PULL_FIELDS)
    else:
        event["issue"] = _picked(target, ISSUE_FIELDS)
    if "comment" in trigger:
        event["comment"] = _picked(trigger["comment"], COMMENT_FIELDS)
    if "review" in trigger:
        event["review"] = _picked(trigger["review"], REVIEW_FIELDS)
    sender = trigger.get("sender")
    event["sender"] = _picked(sender, ("id",))
    if trigger.get("matched") is not None:
        event["matched"] = trigger["matched"]
    return {key: value for key, value in event.items() if value is not None or key == "repository"}


def local_event(
    job: Mapping[str, Any],
    folder_name: str,
    sha: str,
    *,
    scheduled_for: str | None = None,
    previous_run_at: str | None = None,
) -> dict[str, Any]:
    """A local job's event.json: its source (chain, cron or manual), its trigger (cron), its folder's last
    segment, the commit it starts from, and for cron when it was due and when it last ran."""
    cron = job.get("trigger") is not None
    chained = job.get("parentJobId") is not None or job.get("chainDepth") is not None
    event: dict[str, Any] = {"source": "chain" if chained else "cron" if cron else "manual"}
    if cron:
        event["trigger"] = job["trigger"]
    event["folder"] = folder_name
    event["sha"] = sha
    if cron:
        event["scheduledFor"] = scheduled_for
        event["previousRunAt"] = previous_run_at
    return event
