"""Slow and greedy clients: a deadline for a request's headers, one for its body, and caps on the connections held
open, in all and from one address.

The header deadline is aiohttp's keep-alive timeout: since 3.14 it runs from the moment a connection is made and
closes a connection whose handler is still waiting for a whole request, so a client that sends its headers a byte
at a time (slowloris) is cut off at the deadline, and so is one idle between requests. The body deadline runs from
the headers' arrival (`read_body` honours it) and answers 408. A connection past a cap makes room by closing the
oldest connection (of that address, for the per-address cap) that is not serving a request: one still sending its
headers or idle between requests. So a flood of slow sockets, from one address or many, churns only its own, and a
delivery whose headers arrive promptly is served; only when every connection at the cap is serving a request is
the new one answered 503 and closed unread. The caps bound the descriptors the receiver needs
(`core/descriptors.py`, the unit's LimitNOFILE).
"""

from __future__ import annotations

import asyncio
import resource
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

if TYPE_CHECKING:
    from pi_dispatch.config.receiver_settings import ReceiverSettings

CAPS: Final = ("total", "peer")  # in all, and from one address
CAP_ACTIONS: Final = ("evicted", "refused")  # room made by closing an idle connection, or the new one answered 503
BODY_DEADLINE: Final = web.RequestKey("body_deadline", float)  # the loop time a request's body is due by
CAPPED_BODY: Final = b'{"error":"too many connections"}'
CAPPED_ANSWER: Final = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
    b"Content-Length: " + str(len(CAPPED_BODY)).encode() + b"\r\n\r\n" + CAPPED_BODY
)


@dataclass(frozen=True)
class ConnectionLimits:
    """What one receiver allows: its settings' PI_RECEIVER_* deadlines and caps."""

    header_timeout_s: float
    body_timeout_s: float
    max_connections: int
    max_per_peer: int

    @classmethod
    def of(cls, settings: ReceiverSettings) -> ConnectionLimits:
        return cls(
            settings.header_timeout_ms / 1000,
            settings.body_timeout_ms / 1000,
            settings.max_connections,
            settings.max_connections_per_peer,
        )


def peer_address(transport: asyncio.BaseTransport) -> str:
    """The connection's remote address without its port ('' for a socket with none, such as a Unix one)."""
    peer = transport.get_extra_info("peername")
    return str(peer[0]) if isinstance(peer, tuple) and peer else ""


class GuardedServer(web.Server):
    """aiohttp's low-level server with the deadlines and the caps. `capped(cap, action)` is told of each connection
    that met a cap ('total' or 'peer'), and whether room was made by closing an idle one ('evicted') or the new
    one was answered 503 ('refused')."""

    def __init__(
        self,
        handler: Callable[[web.BaseRequest], Awaitable[web.StreamResponse]],
        limits: ConnectionLimits,
        capped: Callable[[str, str], None] = lambda _cap, _action: None,
        **kwargs: Any,
    ) -> None:
        super().__init__(self._guarded, keepalive_timeout=limits.header_timeout_s, **kwargs)
        self._answer, self.limits, self._capped = handler, limits, capped
        self._peers: dict[RequestHandler, tuple[str, asyncio.Transport]] = {}  # oldest first
        self._open_from: Counter[str] = Counter()
        self._busy: set[object] = set()  # connections with a whole request's headers in, not yet answered

    async def _guarded(self, request: web.BaseRequest) -> web.StreamResponse:
        request[BODY_DEADLINE] = asyncio.get_running_loop().time() + self.limits.body_timeout_s
        self._busy.add(request.protocol)
        try:
            return await self._answer(request)
        finally:
            self._busy.discard(request.protocol)

    def _idle(self, peer: str | None) -> RequestHandler | None:
        """The oldest connection (of `peer`, or of anyone) that is not in the middle of a request: one still sending
        its headers, or idle between requests."""
        for handler, (address, _) in self._peers.items():
            if handler not in self._busy and (peer is None or address == peer):
                return handler
        return None

    def connection_made(self, handler: RequestHandler, transport: asyncio.Transport) -> None:
        super().connection_made(handler, transport)
        peer = peer_address(transport)
        cap, victim = None, None
        if len(self._peers) >= self.limits.max_connections:
            cap, victim = CAPS[0], self._idle(None)
        elif self._open_from[peer] >= self.limits.max_per_peer:
            cap, victim = CAPS[1], self._idle(peer)
        if cap is not None and victim is None:  # every connection at the cap is serving a request: keep them
            transport.write(CAPPED_ANSWER)
            # closed once its handler has started (which then ends at once), as a keep-alive timeout closes one;
            # closed here, before the handler starts, the handler would start on a connection already torn down
            asyncio.get_running_loop().call_soon(handler.force_close)
            self._capped(cap, CAP_ACTIONS[1])
            return
        if cap is not None and victim is not None:  # a slow or idle connection makes room for a new one
            self._forget(victim)[1].close()
            self._capped(cap, CAP_ACTIONS[0])
        self._peers[handler] = (peer, transport)
        self._open_from[peer] += 1

    def _forget(self, handler: RequestHandler) -> tuple[str, asyncio.Transport]:
        peer, transport = self._peers.pop(handler)
        self._open_from[peer] -= 1
        if self._open_from[peer] <= 0:
            del self._open_from[peer]
        return peer, transport

    def connection_lost(self, handler: RequestHandler, exc: BaseException | None = None) -> None:
        super().connection_lost(handler, exc)
        self._busy.discard(handler)
        if handler in self._peers:
            self._forget(handler)


def raise_descriptor_limit(needed: int) -> int:
    """Raise this process's open-file limit towards `needed` (never past the hard limit, never lower); the soft limit
    it now has."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    ceiling = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    if soft != resource.RLIM_INFINITY and soft < ceiling:
        resource.setrlimit(resource.RLIMIT_NOFILE, (ceiling, hard))
        return ceiling
    return soft
