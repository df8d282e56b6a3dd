"""What an operator may do from the console: cancel or retry a job, retry the failed jobs of a host or a window,
drain or resume a host. Each calls exactly what
the command of the same name calls (`fleet/steer.py`, `fleet/control.py`), never BullMQ directly; each asks to
confirm first (a page with one button), and its outcome is shown and written to the fleet's trail under the login's
name (`fleet/trail.py`). Only a login of role `operate`, with PI_CONSOLE_ACTIONS=1, may; anyone else is refused 403.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final
from urllib.parse import quote

from aiohttp import web

from pi_dispatch.console.since import since_epoch_ms
from pi_dispatch.core.names import WORKER_NAME_RE
from pi_dispatch.fleet.control import Drain, request_drain
from pi_dispatch.fleet.steer import RETRY_MAX, cancel_job, failed_jobs, queues_for, retry_job
from pi_dispatch.fleet.trail import Action, record_action
from pi_dispatch.infra.clock import wall_ms
from pi_dispatch.web.auth import ACCESS, Session
from pi_dispatch.web.render import CLIENT, SESSION, STORE, page

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from pi_dispatch.infra.store import StoreAddress

CANCEL_WAIT_S: Final = 5.0  # a running job's host stops it within this, or the cancel is pending (it will)
JOB_ID_MAX: Final = 512
# what each action says it does, for its confirmation page
ASKS: Final = {
    "cancel": "Cancel job {target}: stop it wherever it is (a running container is stopped), never retried.",
    "retry": "Run job {target} again, routed anew; its attempt history goes on.",
    "drain": "Drain host {target}: routers skip it, it takes nothing new, what waits on its queue moves to peers.",
    "resume": "Put host {target} back in service.",
    "retry-failed": "Run again every job that failed {since_said}{where}, each routed anew (at most {limit}).",
}
ANY_HOST: Final = "*"  # retry-failed's target when no host narrows it: never a worker's name


def action_path(what: str, target: str) -> str:
    """Where an action's confirmation posts: the target whole, every character that is not plain encoded (a job id
    may hold `?`, `#`, `%` or `/`, which the path it came in on holds decoded)."""
    return f"/act/{what}/{quote(target, safe='')}"


def _operator(request: web.Request) -> Session:
    session = request.get(SESSION)
    if not isinstance(session, Session) or not request.app[ACCESS].may_act(session):
        raise web.HTTPForbidden(text="refused: acting needs a login of role operate, with PI_CONSOLE_ACTIONS=1")
    return session


async def act(request: web.Request) -> web.StreamResponse:
    """An action's confirmation (its button's post), then, confirmed, the action and its outcome."""
    session = _operator(request)
    what = request.match_info["what"]
    target = request.match_info["target"][:JOB_ID_MAX]
    if what in ("drain", "resume") and WORKER_NAME_RE.fullmatch(target) is None:
        raise web.HTTPBadRequest(text="not a worker name")
    form = await request.post()
    client: aioredis.Redis = request.app[CLIENT]  # type: ignore[assignment]
    if what == "retry-failed":
        return await _retry_failed(request, session, target, form)
    if form.get("confirm") != "yes":
        context = {
            "what": what,
            "target": target,
            "ask": ASKS[what].format(target=target),
            "path": action_path(what, target),
        }
        return page(request, "confirm.html", context)
    outcome = await _perform(client, request.app[STORE], what, target)  # type: ignore[arg-type]
    await record_action(client, Action(wall_ms(), session.name or "", "console", what, target, outcome))
    return page(request, "outcome.html", {"what": what, "target": target, "outcome": outcome})


async def _retry_failed(request: web.Request, session: Session, target: str, form: Any) -> web.StreamResponse:
    """`pi-dispatch retry --failed [--host H] [--since S]`: the same finding and the same retry of each, each
    written to the trail as the command writes it."""
    client: aioredis.Redis = request.app[CLIENT]  # type: ignore[assignment]
    since = str(form.get("since", ""))[:40]
    host = None if target == ANY_HOST else target
    if host is not None and WORKER_NAME_RE.fullmatch(host) is None:
        raise web.HTTPBadRequest(text="not a worker name")
    since_ms = since_epoch_ms(since or None)  # a since that does not read: a 400 page saying so
    if form.get("confirm") != "yes":
        ask = ASKS["retry-failed"].format(
            since_said=f"since {since}" if since else "(any time)",
            limit=RETRY_MAX,
            where=f" whose last attempt ran on {host}" if host else "",
        )
        context = {
            "what": "retry-failed",
            "target": target,
            "ask": ask,
            "path": action_path("retry-failed", target),
            "since": since,
        }
        return page(request, "confirm.html", context)
    found = await failed_jobs(client, await queues_for(client, None), since_ms=since_ms, host=host)
    results = []
    for job_id, queue in found:
        done = await retry_job(client, request.app[STORE], job_id, [queue])  # type: ignore[arg-type]
        await record_action(client, Action(wall_ms(), session.name or "", "console", "retry", job_id, done.result))
        results.append((job_id, done.result))
    outcome = f"{sum(result == 'queued' for _, result in results)} of {len(results)} queued"
    return page(
        request, "outcome.html", {"what": "retry-failed", "target": target, "outcome": outcome, "results": results}
    )


async def _perform(client: aioredis.Redis, store: StoreAddress, what: str, target: str) -> str:
    if what == "cancel":
        cancelled = await cancel_job(
            client, target, await queues_for(client, target), now=wall_ms, wait_s=CANCEL_WAIT_S
        )
        return cancelled.result
    if what == "retry":
        return (await retry_job(client, store, target, await queues_for(client, target))).result
    now = wall_ms()
    await request_drain(client, target, Drain(now, None) if what == "drain" else None)
    return "recorded"


def add_routes(app: web.Application) -> None:
    app.router.add_post(r"/act/{what:cancel|retry}/{target}", act)
    app.router.add_post(r"/act/{what:drain|resume}/{target}", act)
    app.router.add_post(r"/act/{what:retry-failed}/{target}", act)
