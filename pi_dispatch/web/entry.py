"""How the console serves: `pi-dispatch console` from the command line (with its overrides), or as its unit starts
it (`console` or `console --env-file FILE`, `infra/units.py`), without the command line's framework: a process that
stays up for months pays for what it loads (bench/console.py: its idle RSS).

It serves behind the receiver's guard (`web/guarded.py`): a deadline for a request's headers, caps on the
connections held open; and a body is at most 64 KiB (`app.py`): the console's forms are small.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from pi_dispatch.core.errors import ExitStatus
from pi_dispatch.infra.signals import until_stop_signal

if TYPE_CHECKING:
    from aiohttp import web

    from pi_dispatch.config.console_settings import ConsoleSettings
    from pi_dispatch.infra.store import StoreAddress
    from pi_dispatch.receiver.guard import ConnectionLimits
    from pi_dispatch.web.auth import Access


def run(env_file: Path | None) -> int:
    """The unit's start: the settings of `env_file` (or the environment), served until SIGTERM; the exit status.
    A refusal of the settings is raised (exit 2, said by the caller)."""
    from pi_dispatch.config.console_settings import load_console_settings
    from pi_dispatch.config.sources import ENVIRONMENT
    from pi_dispatch.infra.extras import require
    from pi_dispatch.infra.store import store_of
    from pi_dispatch.web.auth import Access

    require("console", "jinja2")
    settings = load_console_settings(env_file)
    refuse_exposure(settings, settings.bind, str(env_file) if env_file else ENVIRONMENT)
    access = Access.of(settings)
    address = (settings.bind, settings.port)
    return asyncio.run(
        serve(store_of(settings), access, *address, inventory=settings.inventory, say=_say, complain=_complain)
    )


def refuse_exposure(settings: ConsoleSettings, bind: str, source: str) -> None:
    """Raise ConfigError (exit 2) when `bind` would show the fleet to anyone who reaches it (no login declared)."""
    from pi_dispatch.core.errors import ConfigError

    if problems := settings.exposure_problems(bind, source):
        raise ConfigError(problems)


def _say(line: str) -> None:
    print(line, flush=True)


def _complain(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


async def start_console(
    store: StoreAddress,
    access: Access,
    bind: str,
    port: int,
    inventory: Path | None,
    *,
    limits: ConnectionLimits | None = None,
) -> web.AppRunner:
    """The console listening on bind:port under the receiver's guard (`limits`, else CONSOLE_LIMITS); OSError when
    it cannot listen. Stopped by the runner's cleanup."""
    from aiohttp import web

    from pi_dispatch.web.app import console_app
    from pi_dispatch.web.guarded import CONSOLE_LIMITS, GuardedAppRunner

    limits = limits or CONSOLE_LIMITS

    runner = GuardedAppRunner(console_app(store.client(), store, access, inventory), limits, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, bind, port, reuse_address=True).start()
    except OSError:
        await runner.cleanup()
        raise
    return runner


async def serve(
    store: StoreAddress,
    access: Access,
    bind: str,
    port: int,
    *,
    inventory: Path | None,
    say: Callable[[str], None],
    complain: Callable[[str], None],
) -> int:
    """Serve the console until SIGINT or SIGTERM (exit 0); exit 1 when the port cannot be taken."""
    from pi_dispatch.config.console_settings import is_loopback

    try:
        runner = await start_console(store, access, bind, port, inventory)
    except OSError as error:
        complain(f"error: cannot listen on {bind}:{port} ({error.strerror}); fix: --bind or --port")
        return ExitStatus.FAILURE
    mode = ("actions for operate logins" if access.actions else "read-only") + (
        f", {len(access.logins)} logins" if access.logins else ", no login asked for"
    )
    say(f"pi-dispatch console on http://{bind}:{port}/ ({mode}; {store.shown()})")
    if access.logins and not access.tls and not is_loopback(bind):
        complain(
            f"warning: logins on {bind} over plain HTTP: tokens and session cookies cross the network in the "
            "clear; fix: put a TLS proxy in front, bind 127.0.0.1 and set PI_CONSOLE_TLS=1"
        )
    try:
        await until_stop_signal()
    finally:
        await runner.cleanup()
    return ExitStatus.OK
