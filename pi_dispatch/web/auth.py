"""Who may see the console and who may act from it.

With no login declared (PI_CONSOLE_LOGINS empty) the console asks for none and is read-only: it should then listen
on 127.0.0.1 only (the default). With logins, every page needs a session: a login posts its token, which is hashed
and compared (in constant time) with each declared SHA-256, and gets a session cookie (HttpOnly, SameSite=Strict,
Secure behind TLS) naming a session held in this process (a restart logs everyone out). A session carries its
login's role and a CSRF token. After LOGIN_FAILURES_MAX failed logins in a minute from one address (behind the
declared proxy, PI_CONSOLE_TRUSTED_PROXY, the client it forwards for), no token from there is checked until that
minute has passed (429); other addresses, so the operators, are not slowed by it, and open sessions are not touched.

A request whose Host names neither an IP address, localhost nor a name in PI_CONSOLE_HOSTS is answered 421: a page
of another site whose name an attacker points at this host (DNS rebinding) cannot read the console.

Every POST must come from the console's own pages: a browser's `Sec-Fetch-Site` other than same-origin is refused
403 (SameSite alone let a form on another port of the same host through in our test), and an action must carry the
session's CSRF token. An action needs the role `operate` and PI_CONSOLE_ACTIONS=1.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import urlsplit

from aiohttp import web

from pi_dispatch.config.console_settings import ConsoleSettings, Login
from pi_dispatch.web.render import SESSION, may_act, page

SESSION_COOKIE: Final = "pi_console_session"
SESSION_S: Final = 12 * 3600
LOGIN_FAILURES_MAX: Final = 10  # failed logins a minute from one client address
LOGIN_WINDOW_S: Final = 60.0
ADDRESSES_MAX: Final = 10_000  # client addresses with recent failures kept: the oldest go first
SESSIONS_MAX: Final = 10_000  # the oldest goes first: logging in again and again cannot grow the process
OPEN_PATHS: Final = ("/login", "/static/", "/favicon.ico")
READER: Final = "read"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Session:
    name: str | None  # None: nobody logged in (no login declared: read-only)
    role: str
    csrf: str
    expires_at: float


ANONYMOUS: Final = Session(None, READER, "", float("inf"))


@dataclass
class Access:
    logins: tuple[Login, ...]
    actions: bool
    tls: bool
    hosts: frozenset[str] = frozenset()  # names a Host may give beyond localhost and IP addresses
    trusted_proxy: str = ""  # the proxy whose X-Forwarded-For names the client
    sessions: dict[str, Session] = field(default_factory=dict)
    failures: dict[str, deque[float]] = field(default_factory=dict)  # each address's failed logins of the window

    @classmethod
    def of(cls, settings: ConsoleSettings) -> Access:
        """Who may log in and act, as the console's settings say."""
        return cls(
            settings.declared_logins,
            actions=settings.actions,
            tls=settings.tls,
            hosts=settings.served_names,
            trusted_proxy=settings.trusted_proxy,
        )

    def client_of(self, request: web.BaseRequest) -> str:
        """Who is asking: the connection's address, or for the declared proxy the address it last forwarded."""
        remote = request.remote or ""
        if self.trusted_proxy and remote == self.trusted_proxy:
            forwarded = request.headers.get("X-Forwarded-For", "").split(",")[-1].strip()
            return forwarded[:64] or remote
        return remote

    def login_refused_for(self, client: str, now: float) -> float:
        """Seconds until a token from `client` may be tried again: 0, unless LOGIN_FAILURES_MAX of its failed in
        the last window."""
        failed = self.failures.get(client)
        while failed and failed[0] <= now - LOGIN_WINDOW_S:
            failed.popleft()
        if failed is not None and not failed:
            del self.failures[client]
        return failed[0] + LOGIN_WINDOW_S - now if failed and len(failed) >= LOGIN_FAILURES_MAX else 0.0

    def failed(self, client: str, now: float) -> None:
        while client not in self.failures and len(self.failures) >= ADDRESSES_MAX:
            self.failures.pop(next(iter(self.failures)))
        self.failures.setdefault(client, deque()).append(now)

    def serves(self, host: str | None) -> bool:
        """Whether a request's Host is one this console answers: none given, localhost, an IP address, or a
        declared name (any port)."""
        if not host:
            return True
        try:
            name = urlsplit(f"//{host}").hostname or ""
        except ValueError:  # not a host[:port] at all
            return False
        if name == "localhost" or name in self.hosts:
            return True
        try:
            ipaddress.ip_address(name)
        except ValueError:
            return False
        return True

    def login(self, token: str) -> Login | None:
        """The login this token is, compared with every declared hash in constant time."""
        digest = hashlib.sha256(token.encode()).hexdigest()
        found = None
        for login in self.logins:
            if hmac.compare_digest(digest, login.token_sha256):
                found = login
        return found

    def open_session(self, login: Login) -> str:
        while len(self.sessions) >= SESSIONS_MAX:
            self.sessions.pop(next(iter(self.sessions)))
        session_id = secrets.token_urlsafe(32)
        self.sessions[session_id] = Session(login.name, login.role, secrets.token_urlsafe(32), time.time() + SESSION_S)
        return session_id

    def session_of(self, request: web.Request) -> Session | None:
        if not self.logins:
            return ANONYMOUS
        session_id = request.cookies.get(SESSION_COOKIE, "")
        found = self.sessions.get(session_id)
        if found is not None and found.expires_at < time.time():
            del self.sessions[session_id]
            return None
        return found

    def may_act(self, session: Session) -> bool:
        return may_act(self.actions, session)

    def set_cookie(self, response: web.StreamResponse, session_id: str) -> None:
        response.set_cookie(
            SESSION_COOKIE, session_id, max_age=SESSION_S, path="/", httponly=True, secure=self.tls, samesite="Strict"
        )


ACCESS: Final = web.AppKey("access", Access)


def same_origin(request: web.Request) -> bool:
    """Whether a browser says the request comes from the console's own pages (a client that says nothing, such as
    curl, carries no cookie of a browser's either)."""
    return request.headers.get("Sec-Fetch-Site", "same-origin") in ("same-origin", "none")


@web.middleware
async def authenticated(request: web.Request, handler: Handler) -> web.StreamResponse:
    access = request.app[ACCESS]
    if not access.serves(request.headers.get("Host")):
        raise web.HTTPMisdirectedRequest(text="refused: this console does not answer to that name")
    if request.method == "POST" and not same_origin(request):
        raise web.HTTPForbidden(text="refused: this request did not come from the console's own pages")
    if request.path.startswith(OPEN_PATHS):
        return await handler(request)
    session = access.session_of(request)
    if session is None:
        if request.method == "GET":
            raise web.HTTPFound("/login")
        raise web.HTTPForbidden(text="refused: log in first")
    if request.method == "POST":
        form = await request.post()
        given = str(form.get("csrf", "")).encode()  # bytes: compare_digest refuses a str that is not ASCII
        if not session.csrf or not hmac.compare_digest(given, session.csrf.encode()):
            raise web.HTTPForbidden(text="refused: the form's token is missing or stale; reload the page")
    request[SESSION] = session
    return await handler(request)


async def login_page(request: web.Request) -> web.StreamResponse:
    if not request.app[ACCESS].logins:
        raise web.HTTPFound("/runs")
    return page(request, "login.html", {"failed": False})


async def log_in(request: web.Request) -> web.StreamResponse:
    access = request.app[ACCESS]
    form = await request.post()
    now, client = time.monotonic(), access.client_of(request)
    if (wait_s := access.login_refused_for(client, now)) > 0:  # not even checked: this address guesses slowly
        answer = page(request, "login.html", {"failed": True, "wait_s": int(wait_s) + 1}, status=429)
        answer.headers["Retry-After"] = str(int(wait_s) + 1)
        return answer
    login = access.login(str(form.get("token", ""))[:4096])
    if login is None:
        access.failed(client, now)
        return page(request, "login.html", {"failed": True}, status=401)
    response = web.Response(status=302, headers={"Location": "/runs"})
    access.set_cookie(response, access.open_session(login))
    return response


async def log_out(request: web.Request) -> web.StreamResponse:
    request.app[ACCESS].sessions.pop(request.cookies.get(SESSION_COOKIE, ""), None)
    response = web.Response(status=302, headers={"Location": "/login"})
    response.del_cookie(SESSION_COOKIE, path="/")
    return response
