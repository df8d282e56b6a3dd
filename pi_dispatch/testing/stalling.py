"""A TCP relay to Valkey that can make the connections waiting on a blocking pop go silent, the way a half-open
connection does: the connection stays open, the command reaches the store, and the answer never arrives.

It runs on an event loop of its own, in a thread, so neither a test's loop nor a blocking caller can hold it up.
Only the connections open when `stall_blocking_pops` is called are stalled; a worker that reconnects (as one
restarted by systemd does) gets a working connection, as after a real half-open connection."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from dataclasses import dataclass
from urllib.parse import urlsplit


@dataclass
class _Link:
    blocking: bool = False  # the client has sent BZPOPMIN on it
    stalled: bool = False


class StallingRelay:
    def __init__(self, valkey_url: str) -> None:
        target = urlsplit(valkey_url)
        self.host, self.port = target.hostname or "127.0.0.1", target.port or 6379
        self.stalled_answers = 0
        self._links: list[_Link] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None

    def start(self) -> str:
        """Listen on a free local port; returns the URL to give the worker instead of the store's."""
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._relay, "127.0.0.1", 0), self._loop
        ).result(10)
        return f"redis://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    def stall_blocking_pops(self) -> None:
        for link in list(self._links):
            link.stalled = True

    def close(self) -> None:
        async def shut() -> None:
            if self._server is not None:
                self._server.close()
            tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(shut(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        self._loop.close()

    async def _relay(self, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter) -> None:
        store_in, store_out = await asyncio.open_connection(self.host, self.port)
        link = _Link()
        self._links.append(link)

        async def to_store() -> None:
            while data := await client_in.read(65536):
                link.blocking = link.blocking or b"BZPOPMIN" in data.upper()
                store_out.write(data)
                await store_out.drain()

        async def to_client() -> None:
            while data := await store_in.read(65536):
                if link.stalled and link.blocking:
                    self.stalled_answers += 1  # swallowed: the caller waits on
                    continue
                client_out.write(data)
                await client_out.drain()

        tasks = [asyncio.ensure_future(to_store()), asyncio.ensure_future(to_client())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            for writer in (client_out, store_out):
                with contextlib.suppress(OSError, RuntimeError):  # a transport already gone, or its loop closed
                    writer.close()
            if link in self._links:  # a link already gone is no error of the relay (it printed one mid-bench)
                self._links.remove(link)
