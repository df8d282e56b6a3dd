"""What a forge is to the receiver: one `Forge` spec each, and the request checks the forges share.

A spec says everything that differs between forges: how it is armed from the settings (`arm`, refusals named), how
it connects at boot (its own id there and its authority lookup, `connect`), the path that reaches it, where a
delivery's id is before anything is verified (for the log), how a request is authenticated and its body read
(`verify`, in that forge's own order: the order is part of the wire contract), which authority lookup the gate needs
and when, the gate, how a job's target reads in the log, and what an internal error is logged and answered as.
Endpoints, boot and the server run over the registered specs (`forges.registered`) and never name a forge; a forge
is one package under `forges/`, found by being there.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from aiohttp import ClientPayloadError, web
from aiohttp.http_exceptions import HttpProcessingError

from pi_dispatch.core.errors import Problem
from pi_dispatch.core.jobs import target_separator
from pi_dispatch.forgeapi.http import ForgeClient
from pi_dispatch.infra.events import EventLog
from pi_dispatch.receiver.auth import hub_signature_valid
from pi_dispatch.receiver.forges.authority import Authority
from pi_dispatch.receiver.guard import BODY_DEADLINE
from pi_dispatch.receiver.rules import ForgeRules, Rules

if TYPE_CHECKING:
    from pi_dispatch.config.receiver_settings import ReceiverSettings

MAX_BODY: Final = 2 * 1024 * 1024  # inclusive
JSON_TYPE: Final = "application/json"


class Answered(Exception):
    """A check failed: answer this status and body (None: no body)."""

    def __init__(self, status: int, body: Mapping[str, Any] | None = None, close: bool = False) -> None:
        self.status, self.body, self.close = status, body, close


@dataclass(frozen=True)
class Delivery:
    """A verified delivery: its projected payload, its event name ('' where the forge has none) and its id."""

    payload: dict[str, Any]
    event: str
    id: str
    signature: str = ""  # a signature over the body alone (GitHub's, Forgejo's): what a replay repeats


@dataclass(frozen=True)
class AuthorityLookup:
    """The forge's verdict on the actor that the gate needs: logged as `event`, answered 503 `error` when undecided."""

    event: str
    error: str
    subject: Callable[[Mapping[str, Any]], tuple[object, ...]]
    # Whether this delivery needs the verdict at all (GitHub asks only when a rule would fire), given the rules, the
    # flows a comment may name and the harness's own id; default: always.
    needed: Callable[[Delivery, ForgeRules, frozenset[str], object], bool] = lambda _d, _rules, _flows, _self: True


# verify(request, credential, now_s) -> Delivery, raising Answered for every refusal
Verify = Callable[[web.BaseRequest, Any, float], Awaitable[Delivery]]
# gate(delivery, rules, known_flows, self_id, verdict) -> a job's data, or a Drop
Gate = Callable[[Delivery, ForgeRules, frozenset[str], object, object], object]


Resolver = Callable[..., Awaitable[Authority]]
# retried(forge, attempt): the attempt's answer, tried again on transient failures within the identity window
Retried = Callable[[str, Callable[[], Awaitable[Any]]], Awaitable[Any]]


@dataclass(frozen=True)
class Arming:
    """What a forge is armed from: the settings, the environment (for a variable a setting names), the triggers'
    rules, where the settings came from, and the refusals found so far (every one is named, then boot refuses)."""

    settings: ReceiverSettings
    environment: Mapping[str, str]
    rules: Rules
    source: str
    problems: list[Problem] = field(default_factory=list)

    def require(self, values: Mapping[str, object], forge: str) -> bool:
        """Whether every one of a forge's variables is set; each that is not is a refusal."""
        fix = f"set it, or unset every {forge} variable"
        missing = [
            Problem(name, f"is required once {forge} is configured", self.source, fix)
            for name, value in values.items()
            if value in (None, "")
        ]
        self.problems.extend(missing)
        return not missing


@dataclass(frozen=True)
class Served:
    """A served forge at run time: what authenticates its deliveries, its own id there (its own events never start
    a job), and its authority lookup (None: the forge has none)."""

    credential: object
    identity: object = None
    resolver: Resolver | None = None


Connect = Callable[[Any, ForgeClient, Retried, EventLog], Awaitable[Served]]


def item_target(job: Mapping[str, Any]) -> str:
    """`issue#42`: the item's type and number."""
    found = job.get("target")
    target: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    return f"{target.get('type')}#{target.get('number')}"


def repo_target(kind: str) -> Callable[[Mapping[str, Any]], str]:
    """`<repo>!12` or `<repo>#5`: the repository, the forge's separator for the item's type, its number."""

    def target_of(job: Mapping[str, Any]) -> str:
        found = job.get("target")
        target: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        return f"{job.get('repo')}{target_separator(kind, target.get('type'))}{target.get('number')}"

    return target_of


@dataclass(frozen=True)
class Forge:
    """One forge's spec; `name` is its kind, whose entry (`core/forges.py`) holds its words and its place in the
    reference's order. `path` None: the default endpoint (the one forge that answers every path no other claims).
    `early`: connected before the store is judged, as the reference boots it; `unarmed`: why it is not served,
    logged when it is not."""

    name: str
    path: str | None
    delivery_hint: Callable[[Mapping[str, str]], object]
    verify: Verify
    authority: AuthorityLookup
    gate: Gate
    arm: Callable[[Arming], object | None]
    connect: Connect
    target: Callable[[Mapping[str, Any]], str] = item_target
    early: bool = False
    unarmed: str = ""
    internal_event: str = "verify_handler_error"  # what the log calls an internal error
    internal_error: str = "internal error"  # and the 500 body's `error`

    def internal_fields(self, hint: object, error: Exception) -> Mapping[str, object]:
        """What the log says of an internal error: the delivery id where the forge sends one in a header."""
        del error
        return {"delivery": hint}


def json_type(request: web.BaseRequest) -> bool:
    declared = request.headers.get("Content-Type", "")
    return declared.split(";", 1)[0].strip().lower() == JSON_TYPE


def require_json_post(request: web.BaseRequest, not_post: str, not_json: str) -> None:
    """405 for a method other than POST, then 415 for a body that is not declared JSON."""
    if request.method != "POST":
        raise Answered(405, {"error": not_post})
    if not json_type(request):
        raise Answered(415, {"error": not_json})


async def read_body(request: web.BaseRequest, too_large: Mapping[str, Any]) -> bytes:
    """The body, at most MAX_BODY bytes, by the request's body deadline (`receiver/guard.py`); over the size, 413,
    past the deadline, 408, each with the connection closed."""
    declared = request.content_length
    if declared is not None and declared > MAX_BODY:
        raise Answered(413, too_large, close=True)
    deadline = request.get(BODY_DEADLINE)
    try:
        async with asyncio.timeout_at(deadline if isinstance(deadline, float) else None):
            return await _body(request, declared, too_large)
    except TimeoutError:
        raise Answered(408, {"error": "body not received in time"}, close=True) from None


async def _body(request: web.BaseRequest, declared: int | None, too_large: Mapping[str, Any]) -> bytes:
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


def as_text(body: bytes) -> bytes:
    """The body as the reference MACs it: decoded as UTF-8 (bad bytes replaced), encoded again."""
    return body.decode("utf-8", errors="replace").encode("utf-8")


def parsed(body: bytes, project: Callable[[object], dict[str, Any]], invalid: Mapping[str, Any]) -> dict[str, Any]:
    try:
        return project(json.loads(body.decode("utf-8", errors="replace")))
    except (ValueError, TypeError, RecursionError):
        raise Answered(400, invalid) from None


async def hub_delivery(
    request: web.BaseRequest, secret: bytes, project: Callable[[object], dict[str, Any]]
) -> Delivery:
    """GitHub's checks, which Forgejo speaks too: POST, JSON, a signature, the event headers, the body, the HMAC."""
    require_json_post(request, "method not allowed", "unsupported media type")
    signature = request.headers.get("X-Hub-Signature-256", "")
    if not signature:
        raise Answered(401, {"error": "missing signature"})
    event, delivery = request.headers.get("X-GitHub-Event", ""), request.headers.get("X-GitHub-Delivery", "")
    if not event or not delivery:
        raise Answered(400, {"error": "missing github event headers"})
    body = as_text(await read_body(request, {"error": "payload too large"}))
    if not body:  # the reference answers 500 here (its HMAC library throws): anyone could raise 5xx alerts
        raise Answered(400, {"error": "empty body"})
    if not hub_signature_valid(secret, body, signature):
        raise Answered(401, {"error": "invalid signature"})
    return Delivery(parsed(body, project, {"error": "invalid-json"}), event, delivery, signature)


def hub_verify(project: Callable[[object], dict[str, Any]]) -> Verify:
    """The `verify` of a forge that signs as GitHub does, projecting its payload with `project`."""

    async def verify(request: web.BaseRequest, secret: bytes, _now_s: float) -> Delivery:
        return await hub_delivery(request, secret, project)

    return verify


def hub_hint(headers: Mapping[str, str]) -> object:
    return headers.get("X-GitHub-Delivery") or None
