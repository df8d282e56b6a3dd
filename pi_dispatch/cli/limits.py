"""`pi-dispatch limits`: each window the fleet counts its starts, tokens and dollars in, used against this host's caps
and when it starts again; each scope's windows and who holds its fleet-wide slots; the dollar holds still open; and
which live hosts run with other caps."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape
from rich.table import Table

from pi_dispatch.cli.common import EnvFileOption, JsonOption, ValkeyUrlOption, console, errors, print_json
from pi_dispatch.core.errors import ExitStatus

if TYPE_CHECKING:
    from pi_dispatch.fleet.limitview import LimitsView

LEDGER_NAMES = {"budget": "fleet", "budget:t": "tokens", "budget:usd": "fleet $"}


def _at(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M UTC")


def limits(env_file: EnvFileOption = None, url: ValkeyUrlOption = None, as_json: JsonOption = False) -> None:
    """The fleet's limit windows now: used, this host's cap (its env file's, or the defaults), resets at; each
    scope's; and the live hosts whose caps differ. With --env-file, the file's store too (--valkey-url overrides
    it). Exit 1 when the store cannot be read."""
    from pi_dispatch.cli.reads import store_address, with_client
    from pi_dispatch.config.worker_settings import load_settings
    from pi_dispatch.fleet.limitview import read_limits
    from pi_dispatch.fleet.snapshot import registry_now
    from pi_dispatch.infra.clock import wall_ms
    from pi_dispatch.infra.store import store_of
    from pi_dispatch.infra.valkey import STORE_FAULTS, describe
    from pi_dispatch.worker.gates.limits import read_limit_files

    settings = load_settings(env_file)
    scoped, _ = read_limit_files(settings)
    store = store_of(settings) if env_file is not None and url is None else store_address(url)  # the file's store

    async def read(client: Any) -> LimitsView | str:
        try:
            live = await registry_now(client)
            rows = getattr(live, "hosts", [])  # an unreadable registry: the windows still read
            caps = settings.job_caps
            return await read_limits(
                client,
                caps,
                settings.daily_token_cap,
                scoped,
                rows=rows,
                now_ms=wall_ms(),
                dollars=settings.dollar_caps,
            )
        except STORE_FAULTS as error:
            return describe(error)

    view = asyncio.run(with_client(store, read))
    if isinstance(view, str):
        errors.print(f"[red]the store cannot be read[/red]: {escape(view)}")
        raise typer.Exit(ExitStatus.FAILURE)
    if as_json:
        print_json(view.as_json())
        return
    show(view)


def show(view: LimitsView) -> None:
    """The view as tables and lines."""
    from pi_dispatch.fleet.limitview import money

    table = Table("ledger", "window", "used", "cap", "resets at", box=None, pad_edge=False)
    scoped_rows = [(scope.scope, use) for scope in view.scopes for use in scope.windows]
    for ledger, use in [(use.ledger, use) for use in view.windows] + scoped_rows:
        name = LEDGER_NAMES.get(ledger, ledger) + (" $" if use.dollars and ledger not in LEDGER_NAMES else "")
        shown = money if use.dollars else str
        cap = "-" if use.cap is None else shown(use.cap)
        used = f"[yellow]{shown(use.used)}[/yellow]" if use.near else shown(use.used)
        table.add_row(escape(name), use.window, used, cap, _at(use.resets_at_ms))
    console.print(table)
    for scope in view.scopes:
        if scope.concurrent is not None:
            held = ", ".join(scope.holders) or "none"
            console.print(
                f"{escape(scope.scope)}: {len(scope.holders)}/{scope.concurrent} fleet slots held ({escape(held)})"
            )
    said = {name: limits for name, limits in view.hosts.items() if limits is not None}
    if view.differing:
        console.print("[yellow]live hosts run with different limits[/yellow]:")
        for name, host_limits in sorted(said.items()):
            console.print(
                f"  {escape(name)}: " + ", ".join(f"{key} {value or '-'}" for key, value in host_limits.items())
            )
    elif said:
        console.print(f"{len(said)} live hosts run with the same limits")
    if view.spend_differs:
        console.print(
            "[yellow]live hosts cap dollars differently[/yellow] (fpUsd): "
            + ", ".join(f"{escape(name)} {fp or 'none'}" for name, fp in sorted(view.spend.items()))
        )
    if view.open_holds:
        console.print(f"{view.open_holds} dollar holds open (runs under way, or a dead worker's, settled by its lease)")
