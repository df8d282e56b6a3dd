"""Showing what came from the store, a record or a job on a terminal: as text, never as markup or escapes.

Everything a peer, a job or a hand-edited key can put in front of an operator goes through `visible`: Rich markup
is not interpreted, control and escape characters (C0, DEL, C1, the bidirectional overrides) are shown as
`\\xNN` / `\\uNNNN`, nesting is never walked (a value that is not a scalar is named by its type), and the
length is bounded. Pure.
"""

from __future__ import annotations

import re
from typing import Final

from rich.cells import cell_len
from rich.table import Table
from rich.text import Text

MAX_SHOWN: Final = 200
_HIDDEN: Final = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def plain(value: object, limit: int = MAX_SHOWN) -> str:
    """A value as one safe line: scalars as text, anything else by its type, hidden characters made visible."""
    if value is None:
        return ""
    if isinstance(value, bool | int | float):
        text = str(value)
    elif isinstance(value, str):
        text = value
    else:
        return f"<{type(value).__name__}>"
    shown = _HIDDEN.sub(_escape, text)
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def visible(value: object, limit: int = MAX_SHOWN) -> Text:
    """`plain` as a Rich Text, which a table shows as it is, markup and all."""
    return Text(plain(value, limit))


def keep_whole(table: Table, *headers: str) -> Table:
    """Identifiers (job ids, host and queue names, timestamps) stay whole, so a log of any command can be grepped
    for one: their columns never wrap and are as wide as their longest value, and the prose columns wrap instead.
    Print such a table with `crop=False`: in a pipe narrower than it, its lines run long rather than being cut."""
    for column in table.columns:
        if str(column.header) in headers:
            column.no_wrap, column.overflow = True, "ignore"
            widths = [cell_len(cell.plain) for cell in column.cells if isinstance(cell, Text)]
            column.min_width = max([cell_len(str(column.header)), *widths])
    return table


_HIDDEN_IN_OUTPUT: Final = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def output_text(data: bytes) -> str:
    """A job's output for a terminal: its lines and tabs kept, every other hidden character made visible."""
    return _HIDDEN_IN_OUTPUT.sub(_escape, data.decode("utf-8", "replace"))
