"""The console behind the receiver's guard (`receiver/guard.py`): a deadline for a request's headers and caps on the
connections held open, in all and from one address, a connection past a cap making room by closing the oldest one
that is not serving a request.

aiohttp builds an application's low-level server inside its runner; this is the one place that reaches in: the
runner's `_make_server` is overridden to hand the server aiohttp built (its public `request_handler` and
`request_factory`) to a GuardedServer. `tests/web/test_guarded.py` holds that contract against the installed aiohttp.
"""

from __future__ import annotations

from typing import Any, Final

from aiohttp import web

from pi_dispatch.receiver.guard import ConnectionLimits, GuardedServer

PRIVATE_CONTRACT: Final = {"AppRunner": ("_make_server",), "Server": ("request_handler", "request_factory")}
# What a console allows: its forms are small and a person reads it, so a connection that has not sent its headers
# within 10 s is cut off; 256 open in all, 128 from one address (behind a TLS proxy every one is the proxy's).
CONSOLE_LIMITS: Final = ConnectionLimits(
    header_timeout_s=10.0, body_timeout_s=10.0, max_connections=256, max_per_peer=128
)


class GuardedAppRunner(web.AppRunner):
    """aiohttp's AppRunner whose server is a GuardedServer under `limits`."""

    def __init__(self, app: web.Application, limits: ConnectionLimits, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self.limits, self._server_options = limits, kwargs

    async def _make_server(self) -> web.Server:
        built = await super()._make_server()
        return GuardedServer(
            built.request_handler, self.limits, request_factory=built.request_factory, **self._server_options
        )
