"""The webhook surface: four forge endpoints, answered exactly as the reference answers them.

The path alone picks the endpoint (`/gitlab`, `/forgejo`, `/azure`; anything else is GitHub), never a header,
so a request cannot choose which check it faces. Each endpoint runs its checks in the reference's order (the
order is part of the wire contract: GitHub answers 401 for a missing signature before 400 for missing
headers), then asks the forge about the actor where that forge needs it, runs the gate, fans out replicas
and enqueues each copy on the queue the router picks. 2xx means handled; 503 asks the forge to redeliver.
Logs hold ids, names and reasons only: never a body, a login, an email or a token.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from aiohttp import ClientPayloadError, web
from aiohttp.http_exceptions import HttpProcessingError

from pi_dispatch import forge_azure, forge_forgejo, forge_github, forge_gitlab
from pi_dispatch.enqueue import Enqueuer
from pi_dispatch.events import EventLog
from pi_dispatch.forge_authority import Authority, Undecided
from pi_dispatch.jobs import target_separator
from pi_dispatch.metrics import ReceiverMetrics
from pi_dispatch.rules import Rules
from pi_dispatch.valkey import describe
from pi_dispatch.webhook_auth import AzureVerifier, GitLabVerifier, hub_signature_valid
from pi_dispatch.webhook_routes import Drop

MAX_BODY: Final = 2 * 1024 * 1024  # inclusive
JSON_TYPE: Final = "application/json"
FORGE_PATHS: Final = ("/gitlab", "/forgejo", "/azure")

Resolver = Callable[..., Awaitable[Authority]]


class Answered(Exception):
    """A check failed: answer this status and body (None: no body)."""

    def __init__(self, status: int, body: Mapping[str, Any] | None = None, close: bool = False) -> None:
        self.status, self.body, self.close = status, body, close


class _EmptyBody(Exception):
    """A signed but empty body: the reference's HMAC library throws on it, so it is an internal error there."""


@functools.lru_cache(maxsize=64)
def _encoded(pairs: tuple[tuple[str, str], ...]) -> bytes:
    """A compact JSON body, encoded once: the receiver answers with a handful of fixed bodies."""
    return json.dumps(dict(pairs), separators=(",", ":"), ensure_ascii=False).encode()


def answer(status: int, body: Mapping[str, Any] | None = None, close: bool = False) -> web.Response:
    if status == 204 or body is None:
        response = web.Response(status=status)
    else:
        response = web.Response(status=status, body=_encoded(tuple(body.items())), content_type=JSON_TYPE)
    if close:
        response.force_close()
    return response


def endpoint_path(raw_path: str) -> str:
    path = raw_path.split("?", 1)[0]
    return path[:-1] if len(path) > 1 and path.endswith("/") else path


def _json_type(request: web.BaseRequest) -> bool:
    declared = request.headers.get("Content-Type", "")
    return declared.split(";", 1)[0].strip().lower() == JSON_TYPE


async def _body(request: web.BaseRequest, too_large: Mapping[str, Any]) -> bytes:
    """The body, at most MAX_BODY bytes; over it, 413 and the connection closed."""
    declared = request.content_length
    if declared is not None and declared > MAX_BODY:
        raise Answered(413, too_large, close=True)
    chunks, total = [], 0
    try:
        if declared is not None:  # the common case: one read of exactly what was declared
            return await request.content.readexactly(declared) if declared else b""
        async for chunk in request.content.iter_chunked(65_536):
            total += len(chunk)
            if total > MAX_BODY:
                raise Answered(413, too_large, close=True)
            chunks.append(chunk)
    except (ConnectionError, OSError, ValueError, EOFError, HttpProcessingError, ClientPayloadError):
        # the sender went away mid-body (or framed it wrongly): nobody is left to read an answer
        raise Answered(400, {"error": "incomplete body"}, close=True) from None
    return b"".join(chunks)


def _as_text(body: bytes) -> bytes:
    """The body as the reference MACs it: decoded as UTF-8 (bad bytes replaced), encoded again."""
    return body.decode("utf-8", errors="replace").encode("utf-8")


def _parsed(body: bytes, project: Callable[[object], dict[str, Any]], invalid: Mapping[str, Any]) -> dict[str, Any]:
    try:
        return project(json.loads(body.decode("utf-8", errors="replace")))
    except (ValueError, TypeError, RecursionError):
        raise Answered(400, invalid) from None


def log_target(kind: str, job: Mapping[str, Any]) -> str:
    """`issue#42` on GitHub and Forgejo; `<repo>!12` or `<repo>#5` on GitLab and Azure."""
    found = job.get("target")
    target: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    number = target.get("number")
    if kind in ("github", "forgejo"):
        return f"{target.get('type')}#{number}"
    return f"{job.get('repo')}{target_separator(kind, target.get('type'))}{number}"


@dataclass
class Identities:
    """The harness's own id on each served forge, resolved at boot (Azure's is `{id, email}`)."""

    github: object = None
    gitlab: object = None
    forgejo: object = None
    azure: object = None


@dataclass
class Resolvers:
    """Per-delivery authority lookups, one per forge that needs one (None where the forge is not served)."""

    github: Resolver | None = None
    gitlab: Resolver | None = None
    forgejo: Resolver | None = None
    azure: Resolver | None = None


@dataclass
class Receiver:
    """The four endpoints over one enqueuer; `rules` is swapped in place when the triggers file changes."""

    rules: Rules
    enqueuer: Enqueuer
    log: EventLog
    github_secret: bytes | None = None
    forgejo_secret: bytes | None = None
    gitlab: GitLabVerifier | None = None
    azure: AzureVerifier | None = None
    identities: Identities = field(default_factory=Identities)
    resolvers: Resolvers = field(default_factory=Resolvers)
    error_log: EventLog | None = None
    clock: Callable[[], float] = time.time
    metrics: ReceiverMetrics | None = None

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        path = endpoint_path(request.raw_path)
        if self.metrics is None:
            return await self._answer(request, path)
        response = await self._answer(request, path)
        self.metrics.answered(path[1:] if path in FORGE_PATHS else "github", response.status)
        return response

    async def _answer(self, request: web.BaseRequest, path: str) -> web.StreamResponse:
        handlers = {
            "/gitlab": self._gitlab if self.gitlab else None,
            "/forgejo": self._forgejo if self.forgejo_secret is not None else None,
            "/azure": self._azure if self.azure else None,
        }
        if path in FORGE_PATHS:
            handler = handlers[path]
            if handler is None:
                return answer(404, {"error": f"{path[1:]} webhooks are not configured"})
        elif self.github_secret is None:
            return answer(404, {"error": "github webhooks are not configured"})
        else:
            handler = self._github
        try:
            return await handler(request)
        except Answered as answered:
            return answer(answered.status, answered.body, answered.close)

    def _internal(self, event: str, fields: Mapping[str, Any], body: Mapping[str, Any]) -> web.Response:
        (self.error_log or self.log)(event, fields)
        return answer(500, body)

    async def _hub(self, request: web.BaseRequest, secret: bytes) -> tuple[bytes, str, str]:
        """GitHub's checks, shared with Forgejo: the verified body, the event and the delivery id."""
        if request.method != "POST":
            raise Answered(405, {"error": "method not allowed"})
        if not _json_type(request):
            raise Answered(415, {"error": "unsupported media type"})
        signature = request.headers.get("X-Hub-Signature-256", "")
        if not signature:
            raise Answered(401, {"error": "missing signature"})
        event, delivery = request.headers.get("X-GitHub-Event", ""), request.headers.get("X-GitHub-Delivery", "")
        if not event or not delivery:
            raise Answered(400, {"error": "missing github event headers"})
        body = _as_text(await _body(request, {"error": "payload too large"}))
        if not body:
            raise _EmptyBody()
        if not hub_signature_valid(secret, body, signature):
            raise Answered(401, {"error": "invalid signature"})
        return body, event, delivery

    async def _github(self, request: web.BaseRequest) -> web.StreamResponse:
        delivery = request.headers.get("X-GitHub-Delivery") or None
        try:
            assert self.github_secret is not None
            body, event, delivery = await self._hub(request, self.github_secret)
            p = _parsed(body, forge_github.project, {"error": "invalid-json"})
            rules = self.rules.of("github")
            closer: object = None
            if forge_github.wants_closer_authority(event, p, rules, self.identities.github):  # a close asks
                closer = await self._ask(
                    self.resolvers.github, "github_permission_lookup_failed", "permission-lookup-failed", delivery,
                    p["repository"]["full_name"], p["sender"]["login"],
                )  # fmt: skip
            found = forge_github.gate(
                event,
                p,
                rules,
                self.rules.known_flows,
                self_id=self.identities.github,
                delivery=delivery,
                closer=closer,
            )
            return await self._enqueue("github", found, delivery)
        except Answered:
            raise
        except Exception:
            return self._internal("verify_handler_error", {"delivery": delivery}, {"error": "internal error"})

    async def _forgejo(self, request: web.BaseRequest) -> web.StreamResponse:
        delivery = request.headers.get("X-GitHub-Delivery") or None
        try:
            assert self.forgejo_secret is not None
            body, event, delivery = await self._hub(request, self.forgejo_secret)
            p = _parsed(body, forge_forgejo.project, {"error": "invalid-json"})
            verdict = await self._ask(
                self.resolvers.forgejo, "forgejo_permission_lookup_failed", "permission-lookup-failed", delivery,
                p["repository"]["full_name"], p["sender"]["login"],
            )  # fmt: skip
            rules, flows = self.rules.of("forgejo"), self.rules.known_flows
            own = self.identities.forgejo
            found = forge_forgejo.gate(event, p, rules, flows, self_id=own, authorized=verdict, delivery=delivery)
            return await self._enqueue("forgejo", found, delivery)
        except Answered:
            raise
        except Exception:
            return self._internal("verify_handler_error", {"delivery": delivery}, {"error": "internal error"})

    async def _ask(self, resolver: Resolver | None, event: str, error: str, delivery: object, *args: Any) -> object:
        """The forge's verdict on the actor; Undecided answers 503 so the forge asks again."""
        if resolver is None:
            raise Answered(503, {"error": error})
        verdict = await resolver(*args)
        if isinstance(verdict, Undecided):
            self.log(event, {"delivery": delivery, "reason": verdict.reason})
            raise Answered(503, {"error": error})
        return verdict

    async def _gitlab(self, request: web.BaseRequest) -> web.StreamResponse:
        delivery = request.headers.get("webhook-id") or request.headers.get("Idempotency-Key") or None
        try:
            verifier = self.gitlab
            assert verifier is not None
            if request.method != "POST":
                raise Answered(405, {"error": "method not allowed"})
            if not _json_type(request):
                raise Answered(415, {"error": "unsupported media type"})
            if "X-Gitlab-Event" not in request.headers:
                raise Answered(400, {"error": "missing gitlab event header"})
            if not delivery:
                detail = "send a webhook-id or Idempotency-Key header: GitLab 17.4 or later sends one"
                raise Answered(400, {"error": "missing delivery id", "detail": detail})
            body = _as_text(await _body(request, {"error": "payload too large"}))
            refusal = verifier.refusal(request.headers, body, self.clock())
            if refusal is not None:
                raise Answered(401, {"error": refusal})
            p = _parsed(body, forge_gitlab.project, {"error": "invalid-json"})
            verdict = await self._ask(
                self.resolvers.gitlab, "gitlab_access_lookup_failed", "access-lookup-failed", delivery,
                p["project"]["id"], p["user"]["id"],
            )  # fmt: skip
            rules, flows = self.rules.of("gitlab"), self.rules.known_flows
            own = self.identities.gitlab
            found = forge_gitlab.gate(p, rules, flows, self_id=own, authorized=verdict, delivery=delivery)
            return await self._enqueue("gitlab", found, delivery)
        except Answered:
            raise
        except Exception:
            return self._internal("gitlab_verify_handler_error", {"delivery": delivery}, {"error": "internal error"})

    async def _azure(self, request: web.BaseRequest) -> web.StreamResponse:
        try:
            verifier = self.azure
            assert verifier is not None
            if request.method != "POST":
                raise Answered(405, {"error": "method-not-allowed"})
            if not _json_type(request):
                raise Answered(415, {"error": "unsupported-media-type"})
            body = await _body(request, {"error": "payload-too-large"})
            if not verifier.accepts(request.headers):
                raise Answered(401, {"error": "unauthorized"})
            p = _parsed(body, forge_azure.project, {"error": "invalid-json"})
            delivery = p["id"]
            if not isinstance(delivery, str) or not delivery:
                raise Answered(400, {"error": "missing-delivery-id"})
            verdict = await self._ask(
                self.resolvers.azure, "azure_membership_lookup_failed", "membership-lookup-failed", delivery,
                p.get("project", {}).get("id"), p["actor"],
            )  # fmt: skip
            rules, flows = self.rules.of("azure"), self.rules.known_flows
            own = self.identities.azure
            found = forge_azure.gate(p, rules, flows, self_id=own, authorized=verdict, delivery=delivery)
            return await self._enqueue("azure", found, delivery)
        except Answered:
            raise
        except Exception as error:
            return self._internal("azure_verify_handler_error", {"reason": type(error).__name__}, {"error": "internal"})

    async def _enqueue(self, kind: str, found: object, delivery: object) -> web.Response:
        """Every replica of the job on its routed queue: 202 queued (or deduplicated), 503 when an add fails."""
        if isinstance(found, Drop):
            self.log("dropped", {"delivery": delivery, "reason": found.reason})
            return answer(204)
        assert isinstance(found, dict)
        replicas = found.get("replicas")
        count = replicas if isinstance(replicas, int) and not isinstance(replicas, bool) and replicas > 1 else 1
        created = 0
        flow = {"flow": found["flow"]} if "flow" in found else {}
        shown = {"delivery": delivery, "repo": found.get("repo"), "target": log_target(kind, found), **flow}
        try:
            for replica in range(1, count + 1):
                copy = found if count == 1 else {**found, "replica": replica}
                placed = await self.enqueuer.enqueue_forge_job(kind, copy)
                if placed.deduplicated:
                    self.log("deduplicated", {**shown, "jobId": placed.job_id, "survivingJobId": placed.kept})
                else:
                    created += 1
        except Exception as error:
            self.log("enqueue_failed", {"delivery": delivery, "reason": describe(error)})
            return answer(503, {"error": "enqueue-failed"})
        if created == 0:
            return answer(202, {"status": "deduplicated"})
        self.log("enqueued", {**shown, "replicas": created})
        return answer(202, {"status": "queued"})


def application(receiver: Receiver) -> web.Server:
    """The low-level aiohttp server: every method and path reaches `Receiver.handle`, no router in between."""
    # lingering: after a 413 the unread body is drained for at most a second (aiohttp's default is ten), so a
    # sender that declares a huge body cannot hold a connection open past its answer.
    return web.Server(receiver.handle, lingering_time=1.0)
