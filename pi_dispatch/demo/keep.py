"""`demo --keep`: the example fleet left running for the operator to try the tools on, until Ctrl-C or SIGTERM;
and, without it, the same commands named at the end of the demo."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from rich.console import Console
from rich.markup import escape

from pi_dispatch.console.output import heading
from pi_dispatch.demo.store import free_port
from pi_dispatch.infra.signals import until_stop_signal

if TYPE_CHECKING:
    from aiohttp.web import AppRunner


def tools(url: str, job_id: str | None) -> list[str]:
    """The commands worth trying against the demo's store, each complete (the store named on it)."""
    store = f"--valkey-url {url}"
    return [
        f"pi-dispatch top {store}",
        f"pi-dispatch hosts {store}",
        f"pi-dispatch logs {job_id or 'JOB_ID'} {store}",
        f"pi-dispatch audit -i inventory.example/ --live {store}",
    ]


def say_next(console: Console, url: str, job_id: str | None) -> None:
    console.print(
        "Next: [bold]pi-dispatch demo --keep[/bold] leaves this fleet running, to try against it: "
        + ", ".join(f"`{escape(command.split(' --valkey-url')[0])}`" for command in tools(url, job_id)[::2])
        + "."
    )


async def keep_running(console: Console, url: str, job_id: str | None, inventory: Path) -> None:
    """Hold the fleet up until Ctrl-C or SIGTERM, with the web console on it, having said what to try and how to
    stop it."""
    heading(console, "The example fleet keeps running")
    web_console = await _web_console(url, inventory)
    if web_console is not None:
        address = f"http://127.0.0.1:{web_console.addresses[0][1]}/"
        page = f"{address}jobs/{quote(job_id, safe='')}" if job_id else address
        console.print(f"Web console (read-only): {escape(page)}", soft_wrap=True, highlight=False)
    console.print("Try, in another terminal:")
    for command in tools(url, job_id):
        console.print(f"  {escape(command)}", soft_wrap=True, highlight=False)
    console.print(f"Stop it with Ctrl-C here, or `kill -TERM {os.getpid()}`: its workers and its Valkey stop with it.")
    try:
        await until_stop_signal()
    finally:
        if web_console is not None:
            await web_console.cleanup()


async def _web_console(url: str, inventory: Path) -> AppRunner | None:
    """The console on a free port of 127.0.0.1 over the demo's store (its audit page audits the demo's inventory);
    None when its extra is not installed."""
    if importlib.util.find_spec("jinja2") is None:
        return None
    from pi_dispatch.infra.store import StoreAddress
    from pi_dispatch.web.auth import Access
    from pi_dispatch.web.entry import start_console

    read_only = Access((), actions=False, tls=False)
    return await start_console(StoreAddress(url), read_only, "127.0.0.1", free_port(), inventory)
