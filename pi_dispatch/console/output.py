"""Printing a table (or a frame of them) for a person or for a pipe.

On a terminal, Rich draws it: boxed, its identifier columns whole (`keep_whole`), the prose wrapping. Anywhere else
(a pipe, a file, a log) it is printed as `kubectl get` and `docker ps` print theirs: a title line, then plain columns
at their natural width, two spaces apart, one record a line, never cut, boxed or wrapped, an empty cell as `-`, so a
grep or an awk over it finds every id whole. The cells are already safe text (`terminal.visible`).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

from rich.cells import cell_len
from rich.console import Console, Group, RenderableType
from rich.markup import escape
from rich.measure import Measurement
from rich.panel import Panel
from rich.segment import Segments
from rich.table import Table
from rich.text import Text

GAP = "  "
EMPTY = "-"
WIDEST = 10_000


def stdout_console() -> Console:
    """The operator commands' console: its prose lines are not wrapped when they go anywhere but a terminal."""
    return Console(soft_wrap=not sys.stdout.isatty())


def show(console: Console, renderable: RenderableType) -> None:
    """`renderable` drawn on a terminal, or as plain lines anywhere else."""
    if console.is_terminal:
        # Narrower than its whole columns, Rich would squeeze columns to nothing: the lines run long instead.
        least = Measurement.get(console, console.options.update(max_width=WIDEST), renderable).minimum
        drawn = console.render(renderable, console.options.update_width(max(console.width, least)))
        console.print(Segments(drawn), crop=False)
        return
    for line in plain_lines(console, renderable):
        console.out(line, highlight=False)


def heading(console: Console, title: str) -> None:
    """A section's title: a rule across a terminal, the title's words alone anywhere else (never cut)."""
    if console.is_terminal:
        console.rule(f"[bold]{escape(title)}")
    else:
        console.out(title, highlight=False)


def plain_lines(console: Console, renderable: RenderableType) -> Iterator[str]:
    """A table, a group of them, a panel or a text as lines without any drawing."""
    if isinstance(renderable, Group):
        for part in renderable.renderables:
            yield from plain_lines(console, part)
    elif isinstance(renderable, Table):
        yield from _table_lines(console, renderable)
    elif isinstance(renderable, Panel):
        yield from plain_lines(console, renderable.renderable)
    else:
        text = _text(console, renderable)
        if text:
            yield from text.splitlines()


def _text(console: Console, cell: RenderableType | None) -> str:
    """A cell's words on one line: a Text as it is, a str read as the markup Rich would have read it."""
    if cell is None:
        return ""
    if isinstance(cell, Text):
        return cell.plain
    if isinstance(cell, str):
        return console.render_str(cell).plain
    return f"<{type(cell).__name__}>"


def _table_lines(console: Console, table: Table) -> Iterator[str]:
    columns = [column for column in table.columns if str(column.header) or any(_text(console, c) for c in column.cells)]
    rows = [[" ".join(_text(console, cell).split()) or EMPTY for cell in column.cells] for column in columns]
    headers = [str(column.header) or EMPTY for column in columns]
    widths = [max([cell_len(header), *map(cell_len, cells)]) for header, cells in zip(headers, rows, strict=True)]
    right = [column.justify == "right" for column in columns]

    def line(cells: list[str]) -> str:
        padded = (
            (" " * (width - cell_len(cell)) + cell) if at_right else cell + " " * (width - cell_len(cell))
            for cell, width, at_right in zip(cells, widths, right, strict=True)
        )
        return GAP.join(padded).rstrip()

    if title := _text(console, table.title):
        yield title
    if table.show_header:
        yield line(headers)
    for index in range(table.row_count):
        yield line([cells[index] for cells in rows])
    if caption := _text(console, table.caption):
        yield caption
