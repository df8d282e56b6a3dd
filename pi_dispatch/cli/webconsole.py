"""`pi-dispatch console`: the web console (`web/app.py`), served until stopped. Read-only, on 127.0.0.1 unless
`--bind` says otherwise; it needs the `console` extra (Jinja2), so a worker host pays nothing for it."""

from __future__ import annotations

import asyncio
import signal
from typing import TYPE_CHECKING, Annotated, Final

import typer

from pi_dispatch.cli.common import ValkeyUrlOption, console, errors
from pi_dispatch.core.errors import ExitStatus

if TYPE_CHECKING:
    from pi_dispatch.infra.store import StoreAddress

DEFAULT_PORT: Final = 10480


def webconsole(
    url: ValkeyUrlOption = None,
    bind: Annotated[str, typer.Option("--bind", help="The address to listen on (127.0.0.1: this host only).")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="The port to listen on.")] = DEFAULT_PORT,
) -> None:
    """Serve the web console: find a job, watch its output live, the latest runs, the fleet, the limits and spend.
    Stops on SIGINT or SIGTERM; exit 1 when the port cannot be taken."""
    try:
        import jinja2  # noqa: F401 - the console's one extra dependency
    except ImportError:
        errors.print("error: the console needs its extra: pip install 'pi-dispatch[console]'")
        raise typer.Exit(ExitStatus.FAILURE) from None
    from pi_dispatch.cli.reads import store_address

    code = asyncio.run(_serve(store_address(url), bind, port))
    raise typer.Exit(code)


async def _serve(store: StoreAddress, bind: str, port: int) -> int:
    from aiohttp import web

    from pi_dispatch.web.app import console_app

    runner = web.AppRunner(console_app(store.client(), store), access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, bind, port, reuse_address=True).start()
    except OSError as error:
        await runner.cleanup()
        errors.print(f"error: cannot listen on {bind}:{port} ({error.strerror}); fix: --bind or --port")
        return ExitStatus.FAILURE
    console.print(f"pi-dispatch console on http://{bind}:{port}/ (read-only; {store.shown()})", highlight=False)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
    return ExitStatus.OK
