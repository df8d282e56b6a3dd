"""The worker's Docker socket proxy (`pi-dispatch docker-proxy`, the role's `pi_dispatch_worker_docker_proxy`): the
worker talks to Docker through it, never to the daemon's own socket, and it passes the calls a worker makes and
nothing else (`core/dockerjudge.py` judges each; a container create on its parsed body, a start on the container's
binds as Docker holds them).

One request per connection: the request's head and body are read whole (bounded before they are read: a head of
64 KiB, a create of 1 MiB, any other body of 64 KiB; a chunked body, which a worker never sends, is refused), judged,
and sent on a connection of its own to the daemon with `Connection: close`; the daemon's answer is passed back until
it closes, and so is this connection. Nothing a client sends after its request is read, so no second request rides
on an allowed one, except on an attach, which upgrades to the container's own stream (its stdin) once allowed.
Refusals are 403 with a reason naming the field (Docker's error shape: `{"message": ...}`), logged with the method
and path; a body is never logged. It narrows the grant; it is not a sandbox: rootless Docker is the stronger fix.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import unquote

from pi_dispatch.core.dockerjudge import ATTACH, CREATE, MAX_CREATE_BYTES, START, CreateJudge, Refused, allowed
from pi_dispatch.infra.events import EventLog

HEAD_MAX: Final = 64 * 1024
BODY_MAX: Final = 64 * 1024
INSPECT_TIMEOUT_S: Final = 10.0
CHUNK: Final = 65_536


class BadRequest(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


@dataclass(frozen=True)
class Request:
    method: str
    target: str
    head_lines: tuple[str, ...]  # every header line, as sent
    headers: Mapping[str, str]  # lower-cased names (each at most once)

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]

    @property
    def upgrades(self) -> bool:
        tokens = {token.strip().lower() for token in self.headers.get("connection", "").split(",")}
        return "upgrade" in tokens and "upgrade" in self.headers


def parse_head(head: bytes) -> Request:
    """A request's line and headers. Raises BadRequest for anything a worker's client never sends."""
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError:
        raise BadRequest(400, "the request's head is not ASCII") from None
    line, *lines = text.split("\r\n")
    parts = line.split(" ")
    if len(parts) != 3 or parts[2] not in ("HTTP/1.1", "HTTP/1.0") or not parts[1].startswith("/"):
        raise BadRequest(400, "not an HTTP/1.1 request line")
    headers: dict[str, str] = {}
    kept = []
    for header in filter(None, lines):
        name, colon, value = header.partition(":")
        if not colon or not name or name != name.strip() or header[0] in " \t":
            raise BadRequest(400, "a malformed header")
        key = name.lower()
        if key in headers and key in ("content-length", "transfer-encoding", "connection", "upgrade", "host"):
            raise BadRequest(400, f"{name} twice")
        headers[key] = value.strip()
        kept.append(header)
    return Request(parts[0], parts[1], tuple(kept), headers)


def body_length(request: Request, limit: int) -> int:
    if "transfer-encoding" in request.headers:
        raise BadRequest(411, "a chunked body: send its length")
    declared = request.headers.get("content-length", "0")
    if not declared.isdigit():
        raise BadRequest(400, "Content-Length is not a number")
    if int(declared) > limit:
        raise BadRequest(413, f"a body of more than {limit} bytes")
    return int(declared)


def answer(status: int, reason: str) -> bytes:
    body = json.dumps({"message": f"refused by the pi-dispatch Docker proxy: {reason}"}).encode()
    phrase = http.client.responses.get(status, "Refused")
    head = f"HTTP/1.1 {status} {phrase}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return (head + "Connection: close\r\n\r\n").encode() + body


def inspect_container(docker_socket: str, version_prefix: str, container: str) -> dict[str, Any]:
    """The daemon's view of a container (blocking: run in a thread). Raises OSError or ValueError."""
    connection = http.client.HTTPConnection("docker", timeout=INSPECT_TIMEOUT_S)
    unix = socket.socket(socket.AF_UNIX)
    unix.settimeout(INSPECT_TIMEOUT_S)
    unix.connect(docker_socket)
    connection.sock = unix
    try:
        connection.request("GET", f"{version_prefix}/containers/{container}/json")
        reply = connection.getresponse()
        found = json.loads(reply.read()) if reply.status == 200 else None
    finally:
        connection.close()
    if not isinstance(found, dict):
        raise ValueError("the daemon has no such container")
    return found


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while chunk := await source.read(CHUNK):
            sink.write(chunk)
            await sink.drain()
        if sink.can_write_eof():
            sink.write_eof()


@dataclass(frozen=True)
class DockerProxy:
    judge: CreateJudge
    docker_socket: str
    log: EventLog

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One client connection: one request, judged, then passed to the daemon (or refused)."""
        try:
            await self._serve(reader, writer)
        except BadRequest as bad:
            writer.write(answer(bad.status, bad.reason))
            with contextlib.suppress(ConnectionError, OSError):
                await writer.drain()
        except (ConnectionError, OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # the client or the daemon went away: nothing is left to answer
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            raise BadRequest(431, "a request head of more than 64 KiB") from None
        request = parse_head(head[:-4])
        if not allowed(request.method, request.path):
            self._refused(request, "not a call a worker makes")
            raise BadRequest(403, "not a call a worker makes")
        creating = CREATE.fullmatch(unquote(request.path)) is not None
        body = await reader.readexactly(body_length(request, MAX_CREATE_BYTES if creating else BODY_MAX))
        try:
            await self._judged(request, body, creating)
        except Refused as refused:
            self._refused(request, str(refused))
            raise BadRequest(403, str(refused)) from None
        await self._forward(request, body, reader, writer)

    async def _judged(self, request: Request, body: bytes, creating: bool) -> None:
        if creating:
            self.judge.judge(body)
            return
        started = START.fullmatch(unquote(request.path))
        if started is not None:
            prefix = request.path[: request.path.index("/containers/")]
            try:
                held = await asyncio.to_thread(inspect_container, self.docker_socket, prefix, started.group(1))
            except (OSError, ValueError, http.client.HTTPException):
                raise Refused("the container's binds cannot be read from the daemon") from None
            self.judge.judge_mounts(held)

    async def _forward(
        self, request: Request, body: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        # only an attach is let upgrade: any other call's connection carries its one request, then closes
        upgrading = request.upgrades and ATTACH.fullmatch(unquote(request.path)) is not None
        upstream_reader, upstream_writer = await asyncio.open_unix_connection(self.docker_socket, limit=HEAD_MAX)
        try:
            lines = [f"{request.method} {request.target} HTTP/1.1"]
            lines += [line for line in request.head_lines if upgrading or not _is_connection(line)]
            if not upgrading:
                lines.append("Connection: close")
            upstream_writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
            await upstream_writer.drain()
            if not upgrading:
                await _pipe(upstream_reader, writer)
            elif await _upgraded(upstream_reader, writer):  # the container's stdin follows the request
                onward = asyncio.ensure_future(_pipe(reader, upstream_writer))
                await _pipe(upstream_reader, writer)
                onward.cancel()
        finally:
            upstream_writer.close()

    def _refused(self, request: Request, reason: str) -> None:
        self.log("docker_call_refused", {"method": request.method[:16], "path": request.path[:256], "reason": reason})


async def _upgraded(upstream: asyncio.StreamReader, client: asyncio.StreamWriter) -> bool:
    """Pass the daemon's answer to an attach on; whether it upgraded the connection (101). An answer that did not
    (no such container) is passed on whole and the connection ends there: a request the client sent after it is
    never read, let alone sent to the daemon on a connection it kept open."""
    head = await upstream.readuntil(b"\r\n\r\n")
    client.write(head)
    if head.split(b" ", 2)[1:2] == [b"101"]:
        await client.drain()
        return True
    lengths = [
        line.split(b":", 1)[1].strip() for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
    ]
    declared = lengths[0] if lengths else b"0"
    if declared.isdigit() and 0 < int(declared) <= BODY_MAX:
        client.write(await upstream.readexactly(int(declared)))
    await client.drain()
    return False


def _is_connection(line: str) -> bool:
    return line.split(":", 1)[0].strip().lower() in ("connection", "keep-alive")


def resolver(path: str) -> str | None:
    """A path on this host with its links followed (None when it cannot be: a component that is not there)."""
    try:
        return os.path.realpath(path, strict=True)
    except OSError:
        return None


@dataclass
class Listening:
    """The proxy's listening socket and the connections it is serving. `close` ends both: a connection left to the
    event loop's end (asyncio's server does not wait for them before 3.12) is destroyed pending, its sockets open."""

    server: asyncio.Server
    serving: set[asyncio.Task[Any]]

    async def close(self) -> None:
        self.server.close()
        for task in self.serving:
            task.cancel()
        await asyncio.gather(*self.serving, return_exceptions=True)
        await self.server.wait_closed()


async def start_proxy(proxy: DockerProxy, socket_path: str, group: int | None) -> Listening:
    """Listening on socket_path, 0660, the worker's group owning it (who may ask)."""
    serving: set[asyncio.Task[Any]] = set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            serving.add(task)
            task.add_done_callback(serving.discard)
        await proxy.serve(reader, writer)

    place = Path(socket_path)
    place.unlink(missing_ok=True)
    server = await asyncio.start_unix_server(serve, socket_path, limit=HEAD_MAX)
    place.chmod(0o660)
    if group is not None:
        os.chown(socket_path, -1, group)
    return Listening(server, serving)


async def run_proxy(proxy: DockerProxy, socket_path: str, group: int | None) -> None:
    """Serve until SIGTERM or SIGINT, telling systemd once it listens (the worker's unit starts after it)."""
    from pi_dispatch.infra.sdnotify import notify
    from pi_dispatch.infra.signals import until_stop_signal

    listening = await start_proxy(proxy, socket_path, group)
    proxy.log("docker_proxy_started", {"socket": socket_path})
    notify("READY=1")
    try:
        await until_stop_signal()
    finally:
        notify("STOPPING=1")
        await listening.close()
