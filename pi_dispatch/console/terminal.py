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

from pi_dispatch.console.plaintext import MAX_SHOWN, escape_hidden, plain


def visible(value: object, limit: int = MAX_SHOWN) -> Text:
    """`plain` as a Rich Text, which a table shows as it is, markup and all."""
    return Text(plain(value, limit))


# A value this short (a count, an age, a state) is never wrapped on a terminal; a longer one is prose and may wrap.
SHORT_VALUE: Final = 16


def keep_whole(table: Table, *headers: str) -> Table:
    """Identifiers (job ids, host and queue names, reasons, timestamps) stay whole on a terminal, so what is seen
    can be typed or grepped: their columns never wrap and are as wide as their longest value. Every header and every
    short value stays whole too, and the prose columns wrap instead. Print it with `output.show`: a line wider than
    the terminal runs long rather than being cut, and anywhere but a terminal the table is plain columns."""
    for column in table.columns:
        widths = [cell_len(cell.plain if isinstance(cell, Text) else str(cell)) for cell in column.cells]
        whole = str(column.header) in headers
        if whole:
            column.no_wrap, column.overflow = True, "ignore"
        longest = max(widths, default=0)
        column.min_width = max(cell_len(str(column.header)), longest if whole else min(longest, SHORT_VALUE))
    return table


_HIDDEN_IN_OUTPUT: Final = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def output_text(data: bytes) -> str:
    """A job's output for a terminal: its lines and tabs kept, every other hidden character made visible."""
    return _HIDDEN_IN_OUTPUT.sub(escape_hidden, data.decode("utf-8", "replace"))
