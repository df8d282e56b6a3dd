"""How the console renders a page: Jinja2 templates with autoescape on (a job's id, its data and its output are
hostile text), and what every page is told (the search box's text, who is logged in, the form token)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import quote

import jinja2
from aiohttp import web

from pi_dispatch.console.rowview import run_usage
from pi_dispatch.core.capabilities import is_draining
from pi_dispatch.core.jscompat import iso_string
from pi_dispatch.core.money import format_micros
from pi_dispatch.fleet.limitview import money

TEMPLATES: Final = web.AppKey("templates", jinja2.Environment)
CLIENT: Final = web.AppKey("client", object)  # the store client the console reads (and acts) through
STORE: Final = web.AppKey("store", object)  # the store's address (a retry routes through it)
ACTIONS_ON: Final = web.AppKey("actions_on", bool)  # PI_CONSOLE_ACTIONS
OPERATOR: Final = "operate"


def may_act(actions_on: bool, session: object) -> bool:
    """Whether this session may act: actions on, and a login of role operate."""
    return actions_on and getattr(session, "name", None) is not None and getattr(session, "role", "") == OPERATOR


SESSION: Final = web.RequestKey("session", object)  # where the access middleware leaves the request's session


def templates() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("pi_dispatch.web", "templates"),
        autoescape=True,
    )
    environment.filters["usage"] = run_usage
    environment.filters["draining"] = is_draining
    environment.filters["usd"] = lambda micros: format_micros(int(micros))
    environment.filters["money"] = money
    environment.filters["quoted"] = lambda text: quote(str(text), safe="")
    environment.filters["iso"] = lambda ms: iso_string(ms) if isinstance(ms, int) and ms > 0 else "-"
    environment.filters["ago"] = lambda ms: f"{int(ms) // 1000} s" if isinstance(ms, int | float) else "-"
    return environment


def page(request: web.Request, template: str, context: Mapping[str, Any], status: int = 200) -> web.Response:
    """A page, told what every page is: the search box's text, who is logged in, the form token, whether the
    session may act."""
    session = request.get(SESSION)
    said = {
        "search": request.query.get("q", ""),
        "status": status,
        "session": session,
        "csrf": getattr(session, "csrf", ""),
        "can_act": may_act(request.app[ACTIONS_ON], session),
    }
    rendered = request.app[TEMPLATES].get_template(template).render(**context, **said)
    return web.Response(text=rendered, status=status, content_type="text/html", charset="utf-8")
