"""Calls to a forge's API: one JSON request, never a redirect followed, every failure classified.

A failure is transient (worth another try: no answer, a 5xx, 408, 425, 429, a rate-limited 403, an unreadable
body) or determinate (a 401, a plain 403, a 404, an answer without what was asked). Its reason names the
forge's status or the network error, never a URL, a login, a token or a body.
"""

from __future__ import annotations

import asyncio
import errno
import json
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import aiohttp

from pi_dispatch.forgeapi.errors import ForgeCallError

ATTEMPT_TIMEOUT_S: Final = 10.0
USER_AGENT: Final = "pi-dispatch"
TRANSIENT_STATUSES: Final = frozenset({408, 425, 429})


@dataclass(frozen=True)
class Answer:
    """A forge's answer: its status, the headers a caller reads, and its JSON (None when unreadable)."""

    status: int
    headers: Mapping[str, str] = field(default_factory=dict)
    body: Any = None
    readable: bool = True

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def request_id(self) -> str | None:
        return self.headers.get("x-github-request-id")


def network_reason(error: BaseException) -> str:
    """`request failed: ECONNREFUSED` and the like: the cause, never the URL."""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, TimeoutError | asyncio.TimeoutError):
            return "request failed: timeout"
        if isinstance(cause, OSError) and cause.errno is not None and cause.errno in errno.errorcode:
            return f"request failed: {errno.errorcode[cause.errno]}"
        cause = cause.__cause__ or cause.__context__
    return f"request failed: {type(error).__name__}"


def is_tls_failure(error: BaseException) -> bool:
    return isinstance(error, aiohttp.ClientSSLError | ssl.SSLError)


def status_transient(answer: Answer) -> bool:
    """Whether an HTTP status is worth another try."""
    status = answer.status
    if status <= 0 or status >= 500 or status in TRANSIENT_STATUSES:
        return True
    if status == 403:
        return "retry-after" in answer.headers or answer.headers.get("x-ratelimit-remaining") == "0"
    return False


def failure(answer: Answer, what: str) -> ForgeCallError:
    """The error for an answer that is not the one asked for."""
    transient = status_transient(answer) if not answer.ok else not answer.readable
    reason = f"{what} returned {answer.status}" if not answer.ok else f"{what} answered unreadable JSON"
    return ForgeCallError(reason, transient=transient, status=answer.status, request_id=answer.request_id)


class ForgeClient:
    """One pooled HTTP session for every forge call the receiver makes."""

    def __init__(self, timeout_s: float = ATTEMPT_TIMEOUT_S, ca_file: Path | None = None) -> None:
        self.timeout_s = timeout_s
        self.ca_file = ca_file  # SSL_CERT_FILE: a private CA (GitHub Enterprise Server), else the system's
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            trusted = ssl.create_default_context(cafile=str(self.ca_file)) if self.ca_file is not None else True
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                headers={"user-agent": USER_AGENT},
                connector=aiohttp.TCPConnector(ssl=trusted),
            )
        return self._session

    async def request(self, method: str, url: str, headers: Mapping[str, str], payload: object = None) -> Answer:
        """One request; raises ForgeCallError when no answer came (transient unless TLS refused)."""
        data = None if payload is None else json.dumps(payload).encode()
        sent = dict(headers) | ({"content-type": "application/json"} if data is not None else {})
        try:
            async with self._open().request(method, url, headers=sent, data=data, allow_redirects=False) as reply:
                raw = await reply.read()
                kept = {name.lower(): value for name, value in reply.headers.items()}
                try:
                    body, readable = json.loads(raw) if raw else None, bool(raw)
                except ValueError:
                    body, readable = None, False
                return Answer(reply.status, kept, body, readable)
        except (aiohttp.ClientError, OSError, TimeoutError) as error:
            if is_tls_failure(error):
                raise ForgeCallError("TLS verification failed", transient=False) from None
            raise ForgeCallError(network_reason(error), transient=True) from None

    async def get(self, url: str, headers: Mapping[str, str]) -> Answer:
        return await self.request("GET", url, headers)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
