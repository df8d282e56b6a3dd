"""The web console (`pi-dispatch console`): server-rendered pages over the store (127.0.0.1 unless told otherwise;
who may see and act is `auth.py`, what they may do `actions.py`). Each page answers one question in a bounded number
of round trips whatever the store holds: find a job by id (a search box on every page), the latest runs with
filters, one job (where it is, why, every attempt, its live output), the fleet, and the limits and spend.

Jinja2 renders every page with autoescape on: a job's id, its data and its output are hostile text. Pages load only
this server's own scripts and styles (htmx and a small script, vendored and pinned; no CDN), as the Content Security
Policy says, and are never framed or cached.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Final
from urllib.parse import quote

from aiohttp import web

from pi_dispatch.console.since import since_epoch_ms
from pi_dispatch.core.errors import ConfigError
from pi_dispatch.fleet.registry import LiveHosts
from pi_dispatch.infra.valkey import STORE_FAULTS, describe
from pi_dispatch.web.actions import add_routes
from pi_dispatch.web.audit import AUDITOR, Auditor
from pi_dispatch.web.auth import ACCESS, Access, authenticated, log_in, log_out, login_page
from pi_dispatch.web.live import latest_attempt, stream_log, whole_output
from pi_dispatch.web.reads import (
    OUTCOMES,
    Page,
    RunFilter,
    grouped_answers,
    read_fleet,
    read_job,
    read_runs,
    read_spend,
)
from pi_dispatch.web.render import ACTIONS_ON, CLIENT, STORE, TEMPLATES, page, templates
from pi_dispatch.web.spend import GROUPS, read_spend_report

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from pi_dispatch.infra.store import StoreAddress

JOB_ID_MAX: Final = 512
DEFAULT_SPEND_PERIOD: Final = "7d"
SECURITY_HEADERS: Final = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
STATIC: Final = {  # the only files served, by name: nothing is read from a path a request names
    "htmx.min.js": ("htmx-2.0.11.min.js", "text/javascript"),
    "console.js": ("console.js", "text/javascript"),
    "console.css": ("console.css", "text/css"),
}
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def with_security_headers(_request: web.Request, response: web.StreamResponse) -> None:
    """Every answer's headers as it is sent, a streamed one's (a job's live output, its whole text) included."""
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)


@web.middleware
async def guarded(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A store that cannot be read is said on a page, never a traceback."""
    response: web.StreamResponse
    try:
        response = await handler(request)
    except web.HTTPException as error:  # a redirect or a 404: answered as aiohttp words it, with the headers below
        response = web.Response(status=error.status, text=error.text, headers=error.headers)
    except STORE_FAULTS as error:
        response = page(request, "unavailable.html", {"title": "Not now", "why": describe(error)}, status=503)
    except ConfigError as error:  # a filter that does not read (`since`)
        response = page(request, "unavailable.html", {"title": "That does not read", "why": str(error)}, status=400)
    return response


def _client(request: web.Request) -> aioredis.Redis:
    return request.app[CLIENT]  # type: ignore[return-value]


async def home(request: web.Request) -> web.StreamResponse:
    raise web.HTTPFound("/runs")


async def runs(request: web.Request) -> web.StreamResponse:
    wanted = request.query.get("q", "").strip()
    if wanted:  # the search box: straight to the job
        raise web.HTTPFound(f"/jobs/{quote(wanted[:JOB_ID_MAX], safe='')}")
    chosen = RunFilter.of(request.query, since_epoch_ms(request.query.get("since") or None))
    found, degraded = await read_runs(_client(request), chosen)
    context = {
        "runs": found,
        "degraded": degraded,
        "chosen": asdict(chosen),
        "outcomes": OUTCOMES,
        "since": request.query.get("since", ""),
    }
    return page(request, "runs.html", context)


async def job(request: web.Request) -> web.StreamResponse:
    job_id = request.match_info["job_id"][:JOB_ID_MAX]
    facts = await read_job(_client(request), job_id)
    attempt = await latest_attempt(_client(request), job_id, made=len(facts["history"]))
    every = request.query.get("hosts") == "all"
    context = {
        "job": facts,
        "job_id": job_id,
        "attempt": attempt,
        "every": every,
        "answers": grouped_answers(facts.get("route"), every),
    }
    return page(request, "job.html", context, status=200 if facts["found"] else 404)


async def _attempt_asked(request: web.Request, job_id: str) -> int:
    chosen = request.query.get("attempt", "")
    attempt = int(chosen) if chosen.isascii() and chosen.isdigit() and 0 < int(chosen[:6]) < 10_000 else None
    attempt = attempt or await latest_attempt(_client(request), job_id)
    if attempt is None:
        raise web.HTTPNotFound(text="no output of this job in the store")
    return attempt


async def job_log(request: web.Request) -> web.StreamResponse:
    job_id = request.match_info["job_id"][:JOB_ID_MAX]
    return await stream_log(request, _client(request), job_id, await _attempt_asked(request, job_id))


async def job_output(request: web.Request) -> web.StreamResponse:
    job_id = request.match_info["job_id"][:JOB_ID_MAX]
    return await whole_output(request, _client(request), job_id, await _attempt_asked(request, job_id))


async def fleet(request: web.Request) -> web.StreamResponse:
    read = await read_fleet(_client(request), request.app[STORE])  # type: ignore[arg-type]
    hosts = read.live.hosts if isinstance(read.live, LiveHosts) else []
    state = read.live if not isinstance(read.live, LiveHosts) else None
    named = request.query.get("host", "")[:64]
    shown = Page.of(request.query.get("page", ""), [host for host in hosts if named in str(host["name"])])
    queues = [queue for queue in read.host_queues if named in queue.host]
    context = {
        "hosts": shown,
        "unreachable": state,
        "queues": Page.of(request.query.get("page", ""), queues),
        "waiting": read.waiting[:50],
        "store": read.store,
        "named": named,
        "total": len(hosts),
    }
    return page(request, "fleet.html", context)


async def limits(request: web.Request) -> web.StreamResponse:
    view = await read_spend(_client(request), int(time.time() * 1000))
    since = request.query.get("since", "") or DEFAULT_SPEND_PERIOD
    report = await read_spend_report(_client(request), request.query.get("by", ""), since_epoch_ms(since))
    return page(request, "limits.html", {"view": view, "report": report, "since": since, "groups": GROUPS})


async def audit(request: web.Request) -> web.StreamResponse:
    read = await request.app[AUDITOR].read()
    return page(request, "audit.html", {"read": read}, status=200 if read.report is not None else 503)


async def no_icon(request: web.Request) -> web.StreamResponse:
    return web.Response(status=204)  # browsers ask for one; the console has none


async def static(request: web.Request) -> web.StreamResponse:
    found = STATIC.get(request.match_info["name"])
    if found is None:
        raise web.HTTPNotFound()
    name, kind = found
    body = (resources.files("pi_dispatch.web") / "static" / name).read_bytes()
    return web.Response(body=body, content_type=kind, headers={"Cache-Control": "public, max-age=3600"})


def console_app(
    client: aioredis.Redis, store: StoreAddress, access: Access | None = None, inventory: Path | None = None
) -> web.Application:
    """The console's application over one store client (closed with it); `access` says who may log in and act
    (none: no login, read-only); `inventory` is what its audit page audits (none: no audit page)."""
    app = web.Application(middlewares=[guarded, authenticated], client_max_size=64 * 1024)
    access = access or Access((), actions=False, tls=False)
    app[CLIENT], app[STORE], app[TEMPLATES], app[ACCESS] = client, store, templates(), access
    app[ACTIONS_ON], app[AUDITOR] = access.actions, Auditor(inventory, store)
    app.router.add_get("/", home)
    app.router.add_get("/runs", runs)
    app.router.add_get("/jobs/{job_id}", job)
    app.router.add_get("/jobs/{job_id}/log", job_log)
    app.router.add_get("/jobs/{job_id}/output", job_output)
    app.router.add_get("/fleet", fleet)
    app.router.add_get("/limits", limits)
    app.router.add_get("/audit", audit)
    app.router.add_get("/static/{name}", static)
    app.router.add_get("/favicon.ico", no_icon)
    app.router.add_get("/login", login_page)
    app.router.add_post("/login", log_in)
    app.router.add_post("/logout", log_out)
    add_routes(app)

    async def close(_: web.Application) -> None:
        await client.aclose()

    app.on_response_prepare.append(with_security_headers)
    app.on_cleanup.append(close)
    return app
