"""Printing a table (or a frame of them) for a person or for a pipe.

On a terminal, Rich draws it: boxed, its identifier columns whole (`keep_whole`), the prose wrapping. Anywhere else
(a pipe, a file, a log) it is printed as `kubectl get` and `docker ps` print theirs: a title line, then plain columns
at their natural width, two spaces apart, one record a line, never cut, boxed or wrapped, an empty cell as `-`, so a
grep or an awk over it finds every id whole. The cells are already safe text (`terminal.visible`).

A listing that can hold a row per host or per run (`Rows`) is kept as plain strings until it is printed: through a
pipe it never becomes a Rich table at all, and on a terminal one longer than DRAWN_MAX records is printed as plain
columns too (a boxed table of thousands of hosts takes seconds to lay out, and is read with a pager or grep anyway).
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field

from rich.cells import cell_len
from rich.console import Console, Group, RenderableType
from rich.markup import escape
from rich.measure import Measurement
from rich.panel import Panel
from rich.segment import Segments
from rich.table import Table
from rich.text import Text

from pi_dispatch.console.plaintext import plain
from pi_dispatch.console.terminal import keep_whole

GAP = "  "
EMPTY = "-"
WIDEST = 10_000
DRAWN_MAX = 500  # records: a longer listing is printed as plain columns on a terminal too


@dataclass
class Rows:
    """A listing as plain, safe strings: a title, the headers, the records; which columns are identifiers (never
    cut or wrapped on a terminal) and which are counts (aligned right)."""

    title: str
    headers: Sequence[str]
    whole: Collection[str] = ()
    right: Collection[str] = ()
    records: list[list[str]] = field(default_factory=list)

    def add(self, *cells: object) -> None:
        self.records.append([plain(cell) for cell in cells])

    def table(self) -> Table:
        table = Table(title=Text(self.title))
        for header in self.headers:
            table.add_column(header, justify="right" if header in self.right else "left")
        for record in self.records:
            table.add_row(*map(Text, record))
        return keep_whole(table, *self.whole)

    def lines(self) -> Iterator[str]:
        yield self.title
        yield from aligned(self.headers, self.records, [header in self.right for header in self.headers])


def show_rows(console: Console, rows: Rows) -> None:
    """A listing drawn on a terminal when it is short enough to read there, else as plain columns."""
    if console.is_terminal and len(rows.records) <= DRAWN_MAX:
        show(console, rows.table())
    else:
        console.out("\n".join(rows.lines()), highlight=False)


def aligned(headers: Sequence[str], records: Sequence[Sequence[str]], right: Sequence[bool]) -> Iterator[str]:
    """The header line and one line per record, each column as wide as its widest cell, two spaces apart; a cell's
    own spacing folded to single spaces and an empty one shown as `-`, so every line splits on two spaces."""
    cells = [[" ".join(cell.split()) or EMPTY for cell in record] for record in records]
    titles = [header or EMPTY for header in headers]
    widths = [cell_len(title) for title in titles]
    for record in cells:
        widths = [max(width, cell_len(cell)) for width, cell in zip(widths, record, strict=True)]

    def line(record: Sequence[str]) -> str:
        return GAP.join(
            (" " * (width - cell_len(cell)) + cell) if at_right else cell + " " * (width - cell_len(cell))
            for cell, width, at_right in zip(record, widths, right, strict=True)
        ).rstrip()

    yield line(titles)
    yield from map(line, cells)


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
    lines = list(plain_lines(console, renderable))
    if lines:  # one write: a table of thousands of records costs its text, not a print per record
        console.out("\n".join(lines), highlight=False)


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
    by_column = [[_text(console, cell) for cell in column.cells] for column in columns]
    if title := _text(console, table.title):
        yield title
    headers = [str(column.header) for column in columns] if table.show_header else []
    lines = aligned(
        headers or [""] * len(columns), list(zip(*by_column, strict=True)), [c.justify == "right" for c in columns]
    )
    if not table.show_header:
        next(lines)
    yield from lines
    if caption := _text(console, table.caption):
        yield caption
