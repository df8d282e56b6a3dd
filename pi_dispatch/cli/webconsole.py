"""`pi-dispatch console`: the web console (`web/app.py`), served until stopped, with the settings of its env file
(`config/console_settings.py`: the store, the logins, whether operators may act) or the environment; `--valkey-url`,
`--bind` and `--port` override them. Read-only and on 127.0.0.1 unless told otherwise; it needs the `console` extra
(Jinja2), so a worker host pays nothing for it. Its unit's form (`console [--env-file F]`) starts without the command
line (`web/entry.py`)."""

from __future__ import annotations

import asyncio
from functools import partial
from pathlib import Path
from typing import Annotated

import typer

from pi_dispatch.cli.common import EnvFileOption, ValkeyUrlOption, console, errors


def webconsole(
    env_file: EnvFileOption = None,
    url: ValkeyUrlOption = None,
    bind: Annotated[
        str | None, typer.Option("--bind", help="The address to listen on (default PI_CONSOLE_BIND: 127.0.0.1).")
    ] = None,
    port: Annotated[
        int | None, typer.Option("--port", min=1, max=65535, help="The port (default PI_CONSOLE_PORT: 10480).")
    ] = None,
    inventory: Annotated[
        Path | None,
        typer.Option("--inventory", "-i", help="The inventory its audit page audits (default PI_CONSOLE_INVENTORY)."),
    ] = None,
    check: Annotated[bool, typer.Option("--check", help="Check the settings (exit 0, or 2 naming each problem).")] = (
        False
    ),
) -> None:
    """Serve the web console: find a job, watch its output live, the latest runs, the fleet, the limits and spend.
    Stops on SIGINT or SIGTERM; exit 1 when the port cannot be taken."""
    from pi_dispatch.cli.reads import store_address
    from pi_dispatch.config.console_settings import load_console_settings
    from pi_dispatch.config.sources import ENVIRONMENT
    from pi_dispatch.infra.extras import require

    require("console", "jinja2")  # as the unit's form asks: exit 2 with the line that adds it to this install
    from pi_dispatch.infra.store import store_of
    from pi_dispatch.web.auth import Access
    from pi_dispatch.web.entry import refuse_exposure, serve

    settings = load_console_settings(env_file)
    refuse_exposure(settings, bind or settings.bind, "--bind" if bind else str(env_file or ENVIRONMENT))
    if check:
        mode = "actions for operate logins" if settings.actions else "read-only"
        console.print(f"OK: the console would serve {settings.bind}:{settings.port}, {mode}", highlight=False)
        return
    store = store_address(url) if url is not None else store_of(settings)
    access = Access.of(settings)
    say = partial(console.print, highlight=False)
    address, audited = (bind or settings.bind, port or settings.port), inventory or settings.inventory
    code = asyncio.run(serve(store, access, *address, inventory=audited, say=say, complain=errors.print))
    raise typer.Exit(code)
