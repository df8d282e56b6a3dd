"""`pi-dispatch actions`: the fleet's trail of what operators did (cancel, retry, drain, resume), newest first:
who, through what, when, to what, and how it ended (`fleet/trail.py`)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from pi_dispatch.cli.common import JsonOption, ValkeyUrlOption, console, print_json
from pi_dispatch.cli.reads import run_store


def actions(
    limit: Annotated[int, typer.Option("--limit", min=1, max=10_000, help="How many actions, newest first.")] = 50,
    url: ValkeyUrlOption = None,
    as_json: JsonOption = False,
) -> None:
    """The trail of operators' actions on the fleet: who cancelled, retried, drained or resumed what, when, and how
    it ended. Exit 1 when the store cannot be read."""
    from pi_dispatch.core.jscompat import iso_string
    from pi_dispatch.fleet.trail import read_trail

    async def read(client: Any) -> Any:
        return await read_trail(client, limit)

    found = run_store(url, read)
    if as_json:
        print_json([action.as_json() for action in found])
        return
    table = Table("at", "who", "via", "action", "target", "outcome", box=None, pad_edge=False)
    for action in found:
        table.add_row(
            iso_string(action.at_ms),
            escape(action.who),
            action.via,
            escape(action.what),
            escape(action.target),
            escape(action.outcome),
        )
    console.print(table if found else "no action in the trail")
