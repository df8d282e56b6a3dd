"""`demo --keep`: the example fleet left running for the operator to try the tools on, until Ctrl-C or SIGTERM;
and, without it, the same commands named at the end of the demo."""

from __future__ import annotations

import asyncio
import os
import signal

from rich.console import Console
from rich.markup import escape

from pi_dispatch.console.output import heading


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


async def keep_running(console: Console, url: str, job_id: str | None) -> None:
    """Hold the fleet up until Ctrl-C or SIGTERM, having said what to try and how to stop it."""
    heading(console, "The example fleet keeps running")
    console.print("Try, in another terminal:")
    for command in tools(url, job_id):
        console.print(f"  {escape(command)}", soft_wrap=True, highlight=False)
    console.print(f"Stop it with Ctrl-C here, or `kill -TERM {os.getpid()}`: its workers and its Valkey stop with it.")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signal_number in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signal_number, stop.set)
    try:
        await stop.wait()
    finally:
        for signal_number in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signal_number)
