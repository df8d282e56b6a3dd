"""What every command module shares: the consoles and the options that mean the same everywhere."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

console = Console()
errors = Console(stderr=True, soft_wrap=True)

EnvFileOption = Annotated[
    Path | None, typer.Option("--env-file", help="Read this env file alone (systemd EnvironmentFile syntax).")
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
ValkeyUrlOption = Annotated[
    str | None,
    typer.Option("--valkey-url", help="The shared Valkey (default: $VALKEY_URL). Password: $VALKEY_PASSWORD."),
]
