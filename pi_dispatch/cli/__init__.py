"""The `pi-dispatch` command line: the typer app, one module per command group."""

from pi_dispatch.cli.app import main

__all__ = ["main"]
