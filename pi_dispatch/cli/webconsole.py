"""`pi-dispatch console`: the web console (`web/app.py`), served until stopped, with the settings of its env file
(`config/console_settings.py`: the store, the logins, whether operators may act) or the environment; `--valkey-url`,
`--bind` and `--port` override them. Read-only and on 127.0.0.1 unless told otherwise; it needs the `console` extra
(Jinja2), so a worker host pays nothing for it."""

from __future__ import annotations

import asyncio
import signal
from typing import TYPE_CHECKING, Annotated

import typer

from pi_dispatch.cli.common import EnvFileOption, ValkeyUrlOption, console, errors
from pi_dispatch.core.errors import ExitStatus

if TYPE_CHECKING:
    from pi_dispatch.infra.store import StoreAddress
    from pi_dispatch.web.auth import Access


def webconsole(
    env_file: EnvFileOption = None,
    url: ValkeyUrlOption = None,
    bind: Annotated[
        str | None, typer.Option("--bind", help="The address to listen on (default PI_CONSOLE_BIND: 127.0.0.1).")
    ] = None,
    port: Annotated[
        int | None, typer.Option("--port", min=1, max=65535, help="The port (default PI_CONSOLE_PORT: 10480).")
    ] = None,
    check: Annotated[bool, typer.Option("--check", help="Check the settings (exit 0, or 2 naming each problem).")] = (
        False
    ),
) -> None:
    """Serve the web console: find a job, watch its output live, the latest runs, the fleet, the limits and spend.
    Stops on SIGINT or SIGTERM; exit 1 when the port cannot be taken."""
    try:
        import jinja2  # noqa: F401 - the console's one extra dependency
    except ImportError:
        errors.print("error: the console needs its extra: pip install 'pi-dispatch[console]'")
        raise typer.Exit(ExitStatus.FAILURE) from None
    from pi_dispatch.cli.reads import store_address
    from pi_dispatch.config.console_settings import load_console_settings
    from pi_dispatch.infra.store import store_of
    from pi_dispatch.web.auth import Access

    settings = load_console_settings(env_file)
    if check:
        mode = "actions for operate logins" if settings.actions else "read-only"
        console.print(f"OK: the console would serve {settings.bind}:{settings.port}, {mode}", highlight=False)
        return
    store = store_address(url) if url is not None else store_of(settings)
    access = Access(settings.declared_logins, actions=settings.actions, tls=settings.tls)
    code = asyncio.run(_serve(store, access, bind or settings.bind, port or settings.port))
    raise typer.Exit(code)


async def _serve(store: StoreAddress, access: Access, bind: str, port: int) -> int:
    from aiohttp import web

    from pi_dispatch.web.app import console_app

    runner = web.AppRunner(console_app(store.client(), store, access), access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, bind, port, reuse_address=True).start()
    except OSError as error:
        await runner.cleanup()
        errors.print(f"error: cannot listen on {bind}:{port} ({error.strerror}); fix: --bind or --port")
        return ExitStatus.FAILURE
    mode = ("actions for operate logins" if access.actions else "read-only") + (
        f", {len(access.logins)} logins" if access.logins else ", no login asked for"
    )
    console.print(f"pi-dispatch console on http://{bind}:{port}/ ({mode}; {store.shown()})", highlight=False)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
    return ExitStatus.OK
