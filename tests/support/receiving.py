"""Helpers for the receiver's tests: signed deliveries, a receiver served over real HTTP on a real port, the
jobs it queued read back through BullMQ."""

from __future__ import annotations

import base64
import hashlib
import hmac
import io
import json
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from pi_dispatch.fleet.enqueue import Enqueuer, ForgeRouter
from pi_dispatch.infra.events import Recorder
from pi_dispatch.infra.store import StoreAddress
from pi_dispatch.receiver.auth import hub_signature
from pi_dispatch.receiver.forges.azure.access import AzureVerifier
from pi_dispatch.receiver.forges.gitlab.access import GitLabVerifier
from pi_dispatch.receiver.forges.spec import Resolver
from pi_dispatch.receiver.forges.spec import Served as ForgeServed
from pi_dispatch.receiver.guard import ConnectionLimits
from pi_dispatch.receiver.rules import Rules
from pi_dispatch.receiver.server import Receiver, application
from pi_dispatch.receiver.spool import Spool
from pi_dispatch.testing.receiving import default_limits
from pi_dispatch.triggers.file import parse_triggers

GITHUB_SECRET = "test-webhook-secret"


def rules_of(*entries: Mapping[str, Any]) -> Rules:
    """Rules from trigger entries, through the one parser."""
    return Rules.from_triggers(parse_triggers(json.dumps({"triggers": list(entries)}), "test"))


def github_headers(body: bytes, event: str, delivery: str, secret: str = GITHUB_SECRET) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": hub_signature(secret.encode(), body),
    }


def encode(payload: object) -> bytes:
    return payload if isinstance(payload, bytes) else json.dumps(payload).encode()


def gitlab_signature_headers(
    body: bytes, key: bytes, ident: str = "wh-1", stamp: float | None = None
) -> dict[str, str]:
    when = str(int(stamp if stamp is not None else time.time()))
    mac = hmac.new(key, f"{ident}.{when}.".encode() + body, hashlib.sha256).digest()
    return {"webhook-id": ident, "webhook-timestamp": when, "webhook-signature": "v1," + base64.b64encode(mac).decode()}


@dataclass
class Identities:
    """The harness's own id on each forge a test serves (Azure's is `{id, email}`)."""

    github: object = None
    gitlab: object = None
    forgejo: object = None
    azure: object = None


async def everyone_writes(_repository: object, _login: object) -> bool:
    """GitHub's permission answer for a test that is not about who may start a job: every sender has write."""
    return True


@dataclass
class Resolvers:
    """The authority lookup of each forge a test serves that needs one (GitHub's: every sender writes, unless the
    test wires the real lookup against the stand-in forge)."""

    github: Resolver | None = everyone_writes
    gitlab: Resolver | None = None
    forgejo: Resolver | None = None
    azure: Resolver | None = None


@dataclass
class Served:
    url: str
    receiver: Receiver
    log: Recorder
    errors: Recorder
    session: aiohttp.ClientSession
    queued: list[tuple[str, str]] = field(default_factory=list)

    async def post(
        self, path: str, payload: object, headers: Mapping[str, str], method: str = "POST"
    ) -> tuple[int, Any, Mapping[str, str]]:
        body = encode(payload)
        data = io.BytesIO(body) if len(body) > 1_000_000 else body  # aiohttp warns about a large bytes body
        async with self.session.request(method, self.url + path, data=data, headers=dict(headers)) as reply:
            raw = await reply.read()
            return reply.status, json.loads(raw) if raw else None, reply.headers

    async def github(self, event: str, payload: object, delivery: str, secret: str = GITHUB_SECRET) -> tuple[int, Any]:
        body = encode(payload)
        status, answer, _ = await self.post("/", body, github_headers(body, event, delivery, secret))
        return status, answer

    def events(self, name: str) -> list[dict[str, object]]:
        return [fields for event, fields in self.log.events if event == name]


@asynccontextmanager
async def served(
    valkey_url: str,
    rules: Rules,
    *,
    github_secret: str | None = GITHUB_SECRET,
    forgejo_secret: str | None = None,
    gitlab: GitLabVerifier | None = None,
    azure: AzureVerifier | None = None,
    identities: Identities | None = None,
    resolvers: Resolvers | None = None,
    enqueuer: Enqueuer | None = None,
    limits: ConnectionLimits | None = None,
    capped: Callable[[str, str], None] = lambda _cap, _action: None,
    spool: Spool | None = None,
    authority_kept_s: float = 0.0,
) -> AsyncIterator[Served]:
    """A Receiver over real HTTP on 127.0.0.1, enqueueing through BullMQ on the test's Valkey. It asks the forge
    about every delivery (`authority_kept_s` 0), so a test can change the forge's answer between two; the tests of
    the keeping set the production default."""
    from pi_dispatch.fleet.enqueue import registry_reader
    from pi_dispatch.infra.valkey import connect
    from pi_dispatch.receiver.replay import ReplayGuard

    log, errors = Recorder(), Recorder()
    store = connect(valkey_url)
    enqueuer = enqueuer or Enqueuer(StoreAddress(valkey_url), ForgeRouter(registry_reader(store), log=log))
    credentials = {
        "github": github_secret.encode() if github_secret is not None else None,
        "forgejo": forgejo_secret.encode() if forgejo_secret is not None else None,
        "gitlab": gitlab,
        "azure": azure,
    }
    own, lookups = identities or Identities(github=999, gitlab=999, forgejo=999), resolvers or Resolvers()
    receiver = Receiver(
        rules,
        enqueuer,
        log,
        {
            name: ForgeServed(credential, getattr(own, name), getattr(lookups, name))
            for name, credential in credentials.items()
            if credential is not None
        },
        error_log=errors,
        spool=spool,
        replays=ReplayGuard(store),
        authority_kept_s=authority_kept_s,
    )
    runner = web.ServerRunner(application(receiver, limits or default_limits(), capped), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    session = aiohttp.ClientSession()
    try:
        yield Served(f"http://127.0.0.1:{port}", receiver, log, errors, session)
    finally:
        await session.close()
        await runner.cleanup()
        await enqueuer.close()
        await store.aclose()


async def queued_jobs(valkey_url: str, queue: str = "pi-jobs") -> dict[str, Any]:
    """Every waiting job of a queue by id, read through BullMQ: {id: (name, data, opts)}."""
    from bullmq import Queue

    handle = Queue(queue, {"connection": valkey_url})
    try:
        jobs = await handle.getJobs(["waiting", "delayed", "prioritized"])
        return {job.id: (job.name, job.data, job.opts) for job in jobs}
    finally:
        await handle.close()


def github_labeled(label: str, number: int, repo: str = "acme/app") -> dict[str, Any]:
    """A GitHub `issues labeled` delivery: `label` added to issue `number`, which carries it (sender 1)."""
    issue = {"number": number, "title": "T", "body": "B", "labels": [{"name": label}]}
    return {
        "action": "labeled",
        "sender": {"id": 1},
        "label": {"name": label},
        "issue": issue,
        "repository": {"full_name": repo},
    }
