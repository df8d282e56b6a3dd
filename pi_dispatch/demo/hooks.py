"""The demo's front door: a receiver over real HTTP on 127.0.0.1, and one signed GitHub delivery per example
trigger, shaped like GitHub's own webhook payloads.

The receiver is the product's (`receiver.Receiver`), serving the example triggers with a demo secret. Only what
it would ask GitHub is stood in (its own user 999, and write access for the demo's sender), since a demo must not
need api.github.com.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import aiohttp
from aiohttp import web

from pi_dispatch.config.receiver_settings import ReceiverSettings
from pi_dispatch.fleet.enqueue import Enqueued, Enqueuer
from pi_dispatch.infra.events import EventLog
from pi_dispatch.receiver.auth import hub_signature
from pi_dispatch.receiver.forges.authority import stood_in
from pi_dispatch.receiver.forges.spec import Served
from pi_dispatch.receiver.guard import ConnectionLimits
from pi_dispatch.receiver.rules import Rules
from pi_dispatch.receiver.server import Receiver, application
from pi_dispatch.triggers.file import Trigger

DEMO_SECRET: Final = b"demo-webhook-secret"
REPO: Final = "acme/app"
SENDER: Final[dict[str, Any]] = {"id": 1, "login": "demo-user"}


@dataclass
class RecordingEnqueuer(Enqueuer):
    """The real enqueuer, remembering where each job went so the demo can show it."""

    placed: dict[str, Enqueued] = field(default_factory=dict)

    async def enqueue_forge_job(self, kind: str, job: Mapping[str, Any]) -> Enqueued:
        found = await super().enqueue_forge_job(kind, job)
        self.placed[found.job_id] = found
        return found


def delivery_for(trigger: Trigger, number: int) -> tuple[str, dict[str, Any]] | None:
    """The GitHub event and payload a matching delivery carries; None for a trigger the demo cannot stand in
    for (a close, which asks GitHub about the closer; another forge)."""
    on, run = trigger.on, trigger.run
    if run.get("kind") != "github":
        return None
    title = f"demo {run.get('flow') or run.get('command')}"
    labels = [{"name": name} for name in [*on.get("any", [])[:1], *on.get("all", [])]]
    issue = {"number": number, "title": title, "body": "", "labels": labels, "user": {"login": "demo-user"}}
    base = {"sender": SENDER, "repository": {"full_name": REPO, "private": True}}
    if trigger.on_type == "label":
        return "issues", {"action": "labeled", "label": labels[0] if labels else None, "issue": issue, **base}
    if trigger.on_type == "comment":
        comment = {"body": f"{on['phrase']} please", "author_association": "OWNER", "user": {"login": "demo-user"}}
        return "issue_comment", {"action": "created", "issue": issue, "comment": comment, **base}
    actions = [action for action in on.get("action", []) if action not in ("closed", "review_submitted")]
    if trigger.on_type != "pull_request" or not actions:
        return None
    pr = {
        **issue,
        "author_association": "MEMBER",
        "head": {"ref": "demo", "sha": "0" * 40, "repo": {"full_name": REPO}},
        "base": {"ref": "main"},
    }
    return "pull_request", {"action": actions[0], "number": number, "pull_request": pr, **base}


class DemoReceiver:
    """The receiver on an ephemeral port, and a client that signs and posts deliveries to it."""

    def __init__(self, triggers: list[Trigger], enqueuer: Enqueuer, log: EventLog) -> None:
        self.receiver = Receiver(
            Rules.from_triggers(triggers),
            enqueuer,
            log,
            {"github": Served(DEMO_SECRET, identity=999, resolver=stood_in(SENDER["login"]))},
        )
        # the defaults a receiver runs with when its settings leave them alone
        limits = ConnectionLimits.of(ReceiverSettings.model_construct())
        self._runner = web.ServerRunner(application(self.receiver, limits), access_log=None)
        self._session: aiohttp.ClientSession | None = None
        self.url = ""

    async def __aenter__(self) -> DemoReceiver:
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/"
        self._session = aiohttp.ClientSession()
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._session is not None:
            await self._session.close()
        await self._runner.cleanup()

    async def deliver(self, event: str, payload: Mapping[str, Any], delivery: str) -> int:
        """Sign the payload as GitHub does and POST it; the receiver's HTTP status."""
        assert self._session is not None
        body = json.dumps(payload).encode()
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "GitHub-Hookshot/demo",
            "X-GitHub-Event": event,
            "X-GitHub-Delivery": delivery,
            "X-Hub-Signature-256": hub_signature(DEMO_SECRET, body),
        }
        async with self._session.post(self.url, data=body, headers=headers) as reply:
            return reply.status
