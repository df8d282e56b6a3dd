"""A value from the store, a record or a job as one safe line of text: hidden characters (C0, DEL, C1, the
bidirectional overrides) shown as `\\xNN` / `\\uNNNN`, nesting never walked, the length bounded. Pure, and free of
the terminal's libraries: the web console shows the same text.
"""

from __future__ import annotations

import re
from typing import Final

MAX_SHOWN: Final = 200
HIDDEN: Final = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def escape_hidden(match: re.Match[str]) -> str:
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
    shown = HIDDEN.sub(escape_hidden, text)
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"
