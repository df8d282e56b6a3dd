"""A job's output as it comes, for the browser: server-sent events read from the store's stream of the attempt (the
same entries `logs -f` prints), each event's id the stream entry's id, so a browser that reconnects says
`Last-Event-ID` and resumes after the last line it has. A running job's output is sent from its start.

An event carries the text only, as JSON data; the page puts it in the document as text, never as markup, so what a
job prints (a `<script>` too) is shown, not run. The output was masked by its worker before it was stored.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Final

from aiohttp import web

from pi_dispatch.core.names import record_stem
from pi_dispatch.fleet.jobhistory import Entry, log_attempts, read_attempts, read_entries, wait_entries
from pi_dispatch.infra.valkey import STORE_FAULTS

if TYPE_CHECKING:
    import redis.asyncio as aioredis

PAGE: Final = 500  # entries read at a time while catching up
ENTRY_ID: Final = re.compile(r"[0-9]{1,20}-[0-9]{1,20}")
CONTROL: Final = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|[\x00-\x08\x0b-\x1f\x7f]")  # a terminal's, not a page's


def shown_text(data: bytes) -> str:
    """Output as a page shows it: decoded leniently, terminal colours and other control characters dropped."""
    return CONTROL.sub("", data.decode("utf-8", errors="replace"))


def _event(entry: Entry) -> bytes:
    if entry.kind == "text":
        payload = {"text": shown_text(entry.text)}
    else:  # start or end: what the page says of the attempt
        payload = {key: value for key, value in entry.fields.items() if key in ("host", "at", "exitCode", "reason")}
    data = json.dumps(payload, ensure_ascii=False)
    return f"id: {entry.id}\nevent: {entry.kind}\ndata: {data}\n\n".encode()


async def latest_attempt(client: aioredis.Redis, job_id: str, made: int | None = None) -> int | None:
    """The newest attempt of the job with output in the store (`made`: its attempts on record, when read already)."""
    stem = record_stem(job_id)
    made = len(await read_attempts(client, stem)) if made is None else made
    streams = await log_attempts(client, stem, made + 1)
    return streams[-1] if streams else None


async def stored_entries(client: aioredis.Redis, stem: str, attempt: int, after: str = "-") -> AsyncIterator[Entry]:
    """The attempt's entries already in the store after `after` ("-": from its start), read a page at a time, up
    to its end entry or the last one there is."""
    while entries := await read_entries(client, stem, attempt, after, count=PAGE):
        for entry in entries:
            yield entry
            if entry.kind == "end":
                return
        if len(entries) < PAGE:
            return
        after = entries[-1].id


async def whole_output(request: web.Request, client: aioredis.Redis, job_id: str, attempt: int) -> web.StreamResponse:
    """The attempt's output as its worker kept it in the store (masked, capped there), as plain text: what the page
    keeps only the last 256 KiB of."""
    response = web.StreamResponse(headers={"Content-Type": "text/plain; charset=utf-8", "Cache-Control": "no-store"})
    await response.prepare(request)
    async for entry in stored_entries(client, record_stem(job_id), attempt):
        if entry.kind == "text":
            await response.write(entry.text)
    await response.write_eof()
    return response


async def stream_log(request: web.Request, client: aioredis.Redis, job_id: str, attempt: int) -> web.StreamResponse:
    """The attempt's output from its start (or after Last-Event-ID), then as it comes, until its end."""
    stem = record_stem(job_id)
    resume = request.headers.get("Last-Event-ID", "")
    last = resume if ENTRY_ID.fullmatch(resume) else "0-0"
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    )
    await response.prepare(request)
    try:
        async for entry in stored_entries(client, stem, attempt, "-" if last == "0-0" else last):  # what is there
            await response.write(_event(entry))
            last = entry.id
            if entry.kind == "end":
                return response
        while True:  # then what comes, until the attempt's end
            arrived = await wait_entries(client, stem, attempt, last)
            if not arrived:
                await response.write(b": still running\n\n")
            for entry in arrived:
                await response.write(_event(entry))
                last = entry.id
                if entry.kind == "end":
                    return response
    except STORE_FAULTS:  # the browser reconnects and resumes where it was
        await response.write(b"event: unavailable\ndata: {}\n\n")
    except (ConnectionResetError, asyncio.CancelledError):  # the page went away
        pass
    return response
