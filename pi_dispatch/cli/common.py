"""What every command module shares: the consoles and the options that mean the same everywhere."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from pi_dispatch.console.output import stdout_console
from pi_dispatch.core.errors import ConfigError, ExitStatus, Problem

console = stdout_console()
errors = Console(stderr=True, soft_wrap=True)

EnvFileOption = Annotated[
    Path | None, typer.Option("--env-file", help="Read this env file alone (systemd EnvironmentFile syntax).")
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
ValkeyUrlOption = Annotated[
    str | None,
    typer.Option("--valkey-url", help="The shared Valkey (default: $VALKEY_URL). Password: $VALKEY_PASSWORD."),
]
ExtraVarsOption = Annotated[
    str | None,
    typer.Option(
        "-e", "--extra-vars", help="Variables as a JSON object that win over the inventory's, as the play's do."
    ),
]


def extra_variables(text: str | None) -> dict[str, object]:
    """The -e variables: a JSON object, or a config error naming the option."""
    try:
        extra = json.loads(text) if text else {}
    except ValueError:
        extra = None
    if not isinstance(extra, dict):
        raise ConfigError([Problem("--extra-vars", "is not a JSON object", "command line", 'write {"name": value}')])
    return extra


def print_json(document: object) -> None:
    """What a --json option prints: the document, indented, on stdout (never through rich, which would wrap it)."""
    sys.stdout.write(json.dumps(document, indent=2) + "\n")


@contextmanager
def problems_as_json(as_json: bool) -> Iterator[None]:
    """With --json, a config error is printed as JSON on stdout (every problem, each with its fields), exit 2;
    without, it goes to the usual one-line report."""
    try:
        yield
    except ConfigError as error:
        if not as_json:
            raise
        listed = [asdict(problem) for problem in error.problems]
        print_json({"ok": False, "problems": listed})
        raise typer.Exit(ExitStatus.CONFIG) from None


def write_file(path: Path, text: str, option: str, *, exclusive: bool = False) -> bool:
    """Write a file the operator named; False when `exclusive` and it exists. A path that cannot be written is the
    operator's to fix: one line naming the option and why (exit 2), never a traceback."""
    try:
        with path.open("x" if exclusive else "w", encoding="utf-8") as handle:
            handle.write(text)
    except FileExistsError:
        if exclusive:
            return False
        raise
    except OSError as error:
        fix = "create its folder, or pass a path in a folder you can write to"
        raise ConfigError([Problem(str(path), f"cannot be written ({error.strerror})", option, fix)]) from None
    return True
