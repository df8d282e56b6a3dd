"""Azure DevOps: the payload fields a gate may see, the actor (a GUID or an email), the gate, and its `SPEC`.

Azure sends no delivery header: the body's own `id` is the delivery. Tags on work items play the part labels
play elsewhere; a work item names only its project, so label and comment rules name the repository to clone.
Every delivery needs the actor's project membership resolved first, handed in as the verdict. An email never
leaves the projection: a job names an email-only actor by `azid-` and a hash of it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any, Final

from aiohttp import web

from pi_dispatch.core.jscompat import JS_SPACE, MISSING, get, js_trim, nullish
from pi_dispatch.receiver.forges.azure.access import AzureVerifier
from pi_dispatch.receiver.forges.spec import (
    Answered,
    Delivery,
    Forge,
    parsed,
    read_body,
    require_json_post,
)
from pi_dispatch.receiver.routes import (
    Drop,
    Verdict,
    comment_execution,
    comment_matched,
    first_label_rule,
    job_literal,
    label_matched,
    refuse_null,
    trigger_object,
)
from pi_dispatch.receiver.rules import ForgeRules, Rule

WORK_ITEM_EVENTS: Final = ("workitem.created", "workitem.updated", "workitem.commented")
PR_EVENTS: Final = {"git.pullrequest.created": "created", "git.pullrequest.updated": "updated"}
PR_COMMENT_EVENT: Final = "ms.vss-code.git-pullrequest-comment-event"
# The event types handled, and the action word a job's trigger names for each.
EVENT_ACTIONS: Final = {
    "workitem.created": "created",
    "workitem.updated": "updated",
    "workitem.commented": "commented",
    **PR_EVENTS,
    PR_COMMENT_EVENT: "commented",
}
_SPACE: Final = f"[{re.escape(JS_SPACE)}]"
_ANGLED: Final = re.compile(r"<([^<>]+)>\Z")
_BARE: Final = re.compile(f"[^<>@{re.escape(JS_SPACE)}]+@[^<>@{re.escape(JS_SPACE)}]+")


def extract_email(value: object) -> str | None:
    """The address in `Name <address>` or a bare address, lower-cased; a name merely containing one is not one."""
    if not isinstance(value, str):
        return None
    text = js_trim(value)
    angled = _ANGLED.search(text)
    if angled is not None:
        return js_trim(angled.group(1)).lower() or None
    return text.lower() if _BARE.fullmatch(text) else None


def parse_tags(value: object) -> list[dict[str, str]]:
    """Azure's one `;`-separated tag string as `[{name}]`: split, trimmed, empties dropped."""
    if not isinstance(value, str):
        return []
    return [{"name": name} for name in (js_trim(part) for part in value.split(";")) if name]


def _unwrapped(value: object) -> object:
    """A diff's `{oldValue, newValue}` pair read as its new value."""
    if isinstance(value, Mapping) and ("newValue" in value or "oldValue" in value):
        return value.get("newValue", MISSING)
    return value


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _actor(resource: object, fields: object) -> dict[str, str]:
    for guid in (
        get(get(resource, "createdBy"), "id"),
        get(get(get(resource, "comment"), "author"), "id"),
        get(get(get(resource, "pullRequest"), "createdBy"), "id"),
    ):
        if _text(guid):
            return {"id": str(guid)}
    for key in ("System.ChangedBy", "System.CreatedBy"):
        email = extract_email(_unwrapped(get(fields, key)))
        if email:
            return {"email": email}
    return {}


def project(payload: object) -> dict[str, Any]:
    """The only fields the gate and the job may see. Raises TypeError on JSON null."""
    refuse_null(payload)
    event, resource = get(payload, "eventType"), get(payload, "resource")
    kind = event if isinstance(event, str) else ""  # a hostile eventType is kept, and handled as nothing
    containers_project = get(get(get(payload, "resourceContainers"), "project"), "id")
    diff = get(resource, "fields")
    current = get(get(resource, "revision"), "fields")
    fields = current if isinstance(current, Mapping) else diff
    projected: dict[str, Any] = {"eventType": event, "id": get(payload, "id"), "actor": _actor(resource, fields)}
    if kind in WORK_ITEM_EVENTS:
        number = get(resource, "workItemId")
        projected |= {
            "project": {"id": containers_project, "name": _unwrapped(get(fields, "System.TeamProject"))},
            "target": {
                "number": get(resource, "id") if nullish(number) else number,
                "title": _unwrapped(get(fields, "System.Title")),
                "body": _unwrapped(get(fields, "System.Description")),
            },
            "tags": parse_tags(_unwrapped(get(fields, "System.Tags"))),
        }
        tags = get(diff, "System.Tags")
        if isinstance(tags, Mapping):
            projected["tagChanges"] = {
                "previous": parse_tags(tags.get("oldValue", "")),
                "current": parse_tags(tags.get("newValue")),
            }
        if kind == "workitem.commented":
            projected["comment"] = _unwrapped(get(fields, "System.History"))
    elif kind in EVENT_ACTIONS:
        pr = get(resource, "pullRequest") if kind == PR_COMMENT_EVENT else resource
        repository = get(pr, "repository")
        project_id = containers_project if _text(containers_project) else get(get(repository, "project"), "id")
        projected |= {
            "project": {"id": project_id, "name": get(get(repository, "project"), "name")},
            "repository": {"id": get(repository, "id"), "name": get(repository, "name")},
            "target": {
                "number": get(pr, "pullRequestId"),
                "title": get(pr, "title"),
                "body": get(pr, "description"),
                "head": {"ref": _branch(get(pr, "sourceRefName"))},
                "base": {"ref": _branch(get(pr, "targetRefName"))},
            },
        }
        if kind == PR_COMMENT_EVENT:
            projected["comment"] = get(get(resource, "comment"), "content")
    return projected


def _branch(ref: object) -> object:
    return ref.removeprefix("refs/heads/") if isinstance(ref, str) else ref


def sender_id(actor: Mapping[str, str]) -> str:
    """The actor's id a job may carry: the GUID, or `azid-` and 16 hex of SHA-256 of the email (never the email)."""
    if "id" in actor:
        return actor["id"]
    return "azid-" + hashlib.sha256(actor["email"].encode()).hexdigest()[:16]


def is_self(actor: Mapping[str, str], self_id: object) -> bool:
    own_id, own_email = get(self_id, "id"), get(self_id, "email")
    if "id" in actor and isinstance(own_id, str) and own_id:
        return actor["id"] == own_id
    if "email" in actor and isinstance(own_email, str) and own_email:
        return actor["email"] == own_email.lower()
    return False


def _route(p: Mapping[str, Any], rules: ForgeRules, known_flows: frozenset[str]) -> tuple[Rule, Any, Any] | Drop:
    """The rule that fires, what it matched, and its flow or command; or why nothing does."""
    event = p["eventType"]
    if event in ("workitem.commented", PR_COMMENT_EVENT):
        if rules.comment is None:
            return Drop("no-trigger-phrase")
        execution = comment_execution(rules.comment, p.get("comment"), known_flows)
        if isinstance(execution, Drop):
            return execution
        return rules.comment, comment_matched(rules.comment), execution
    if event == "workitem.created":
        tags = [tag["name"] for tag in p["tags"]]
    elif event == "workitem.updated":
        changes = p.get("tagChanges")
        previous = {tag["name"] for tag in changes["previous"]} if changes else set()
        tags = [tag["name"] for tag in changes["current"] if tag["name"] not in previous] if changes else []
        if not tags:
            return Drop("no-label-change")
    elif event in PR_EVENTS:
        action = PR_EVENTS[event]
        rule = next((rule for rule in rules.pull_request if action in rule.actions), None)
        if rule is None:
            return Drop("no-matching-pr-trigger")
        return rule, {"index": rule.index, "type": "pull_request", "action": action}, rule.execution()
    else:
        return Drop("unhandled-event")
    found = first_label_rule(rules.label, tags)
    if found is None:
        return Drop("no-allowlisted-label")
    return found, label_matched(found, tags), found.execution()


def gate(
    p: Mapping[str, Any],
    rules: ForgeRules,
    known_flows: frozenset[str],
    *,
    self_id: object,
    authorized: object,
    delivery: object,
) -> Verdict:
    """An Azure DevOps delivery's job, or why it is dropped. `authorized` is the resolved membership verdict."""
    actor = p["actor"]
    if not actor:
        return Drop("missing-sender-id")
    if is_self(actor, self_id):
        return Drop("self")
    if authorized is not True:
        return Drop("author-not-allowed")
    event = p["eventType"]
    if not isinstance(event, str) or event not in EVENT_ACTIONS:
        return Drop("unhandled-event")
    routed = _route(p, rules, known_flows)
    if isinstance(routed, Drop):
        return routed
    rule, matched, execution = routed
    project_name = _text(p["project"]["name"])
    repository = _text(get(p.get("repository"), "name")) or rule.repository
    if project_name is None or repository is None:
        return Drop("no-repository")
    scope: dict[str, Any] = {"project": project_name}
    if _text(p["project"]["id"]):
        scope["projectId"] = p["project"]["id"]
    scope["repository"] = repository
    if _text(get(p.get("repository"), "id")):
        scope["repositoryId"] = p["repository"]["id"]
    pr = event in PR_EVENTS or event == PR_COMMENT_EVENT
    action = EVENT_ACTIONS[event]
    target = {"type": "pull_request" if pr else "issue", **p["target"]}
    comment = {"body": p.get("comment")} if matched["type"] == "comment" else None
    trigger = trigger_object(event, action, delivery, sender_id(actor), matched, comment=comment)
    return job_literal(f"{project_name}/{repository}", target, execution, trigger, {"azure": scope})


class AzureForge(Forge):
    """Azure's spec: its internal errors logged by their kind, not by a delivery id."""

    def internal_fields(self, hint: object, error: Exception) -> Mapping[str, object]:
        """Azure's delivery id is in the body, which may be what failed: the log says what went wrong instead."""
        del hint
        return {"reason": type(error).__name__}


async def _verify(request: web.BaseRequest, verifier: AzureVerifier, _now_s: float) -> Delivery:
    require_json_post(request, "method-not-allowed", "unsupported-media-type")
    body = await read_body(request, {"error": "payload-too-large"})
    if not verifier.accepts(request.headers):
        raise Answered(401, {"error": "unauthorized"})
    p = parsed(body, project, {"error": "invalid-json"})
    delivery = p["id"]
    if not isinstance(delivery, str) or not delivery:
        raise Answered(400, {"error": "missing-delivery-id"})
    return Delivery(p, "", delivery)


def _gate(d: Delivery, rules: ForgeRules, flows: frozenset[str], self_id: object, verdict: object) -> Verdict:
    return gate(d.payload, rules, flows, self_id=self_id, authorized=verdict, delivery=d.id)
