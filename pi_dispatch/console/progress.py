"""Progress on the long operator commands (`audit`, `demo`): a transient rich progress line on a terminal, and
nothing at all when the output is a pipe, a file or JSON, so scripts read only the result."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn


@contextlib.contextmanager
def progress(console: Console, *, quiet: bool = False) -> Iterator[Progress]:
    """A Progress to add steps to; disabled (every call does nothing) unless the console is a terminal."""
    shown = console.is_terminal and not console.is_dumb_terminal and not quiet
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not shown,
    ) as bar:
        yield bar
