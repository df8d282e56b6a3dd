"""A local stand-in for the forges' HTTP APIs (GitHub, GitLab, Forgejo, Azure DevOps): real HTTP on a real port.

Tests set what each path answers (`answer`), and read what was asked (`requests`), so the receiver's identity and
authority calls go over the wire as they would to the forge. Nothing here mocks the receiver.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class Reply:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    raw: bytes | None = None


@dataclass
class Asked:
    method: str
    path: str  # with the query string, as sent (percent-encoding kept)
    headers: dict[str, str]
    body: Any


class FakeForge:
    """Answers `(method, path)` with a Reply (or a function of the request); 404 for anything unset."""

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], Reply | Callable[[Asked], Reply]] = {}
        self.requests: list[Asked] = []
        self._runner: web.AppRunner | None = None
        self.url = ""

    def answer(self, method: str, path: str, reply: Reply | Callable[[Asked], Reply]) -> None:
        self.routes[(method, path)] = reply

    def asked(self, path_prefix: str = "") -> list[Asked]:
        return [request for request in self.requests if request.path.startswith(path_prefix)]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw
        asked = Asked(request.method, request.raw_path, {k.lower(): v for k, v in request.headers.items()}, body)
        self.requests.append(asked)
        route = self.routes.get((request.method, request.raw_path))
        reply = route(asked) if callable(route) else route
        if reply is None:
            return web.json_response({"message": "Not Found"}, status=404)
        if reply.delay_s:
            await asyncio.sleep(reply.delay_s)
        if reply.raw is not None:
            return web.Response(status=reply.status, body=reply.raw, headers=reply.headers)
        return web.json_response(reply.body, status=reply.status, headers=reply.headers)

    async def start(self) -> FakeForge:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
