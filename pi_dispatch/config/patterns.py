"""Patterns the schemas publish: a Python pattern as an ECMA-262 one, and a range of whole numbers as a pattern.

JSON Schema has no way to bound a number written as a string (every env value is one), so a setting's bounds
become a pattern that matches exactly the numbers in range, written in decimal without a leading zero. Pure.
"""

from __future__ import annotations

from typing import Final

END: Final = r"\Z"  # Python's end of string
NOTHING_AFTER: Final = r"(?![\s\S])"  # the same in ECMA-262, where `$` may match before a final newline


def _alternatives(pattern: str) -> bool:
    """Whether a pattern has a `|` outside any group or character class."""
    depth, in_class, escaped = 0, False, False
    for char in pattern:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char in "()":
            depth += 1 if char == "(" else -1
        elif char == "|" and depth == 0:
            return True
    return False


def grouped(pattern: str) -> str:
    """The pattern as one unit to anchor or repeat: in a group only when it has alternatives of its own."""
    return f"(?:{pattern})" if _alternatives(pattern) else pattern


def schema_pattern(pattern: str) -> str:
    """A Python pattern as a JSON Schema (ECMA-262) pattern that must match the whole string.

    ECMA's `$` also matches before a final newline in some engines; `(?![\\s\\S])` never does.
    """
    body = grouped(pattern.removesuffix(END))
    return f"^{body}{NOTHING_AFTER}"


def schema_tail(pattern: str) -> str:
    """A Python pattern anchored at the end (`\\Z`) as a JSON Schema pattern that must match the string's end."""
    return pattern.removesuffix(END) + NOTHING_AFTER


def _digit_blocks(low: int, high: int) -> list[str]:
    """Alternatives that match exactly the decimal numbers low..high (low >= 1), without leading zeros."""
    blocks: list[tuple[int, int, int]] = []
    start = low
    while start <= high:
        width = 0  # the block covers start .. start + 10**width - 1, aligned on 10**width
        while start % 10 ** (width + 1) == 0 and start + 10 ** (width + 1) - 1 <= high:
            width += 1
        step = 10**width
        decade_end = min(high + 1, (start // (step * 10) + 1) * step * 10)
        end = start + (decade_end - start) // step * step - 1
        blocks.append((start, end, width))
        start = end + 1
    alternatives: list[str] = []
    for first, last, width in blocks:
        head, low_digit, high_digit = str(first)[: -width - 1], str(first)[-width - 1], str(last)[-width - 1]
        digit = low_digit if low_digit == high_digit else f"[{low_digit}-{high_digit}]"
        tail = "" if width == 0 else "[0-9]" if width == 1 else f"[0-9]{{{width}}}"
        alternatives.append(head + digit + tail)
    return _merge_full_decades(alternatives)


def _full_decade(width: int) -> str:
    """Every number of width + 1 digits."""
    return "[1-9]" + ("" if width == 0 else "[0-9]" if width == 1 else f"[0-9]{{{width}}}")


def _merge_full_decades(alternatives: list[str]) -> list[str]:
    """Consecutive full decades (`[1-9][0-9]`, `[1-9][0-9]{2}`, ...) as one alternative `[1-9][0-9]{1,2}`."""
    merged: list[str] = []
    index = 0
    while index < len(alternatives):
        width = next((w for w in range(19) if alternatives[index] == _full_decade(w)), None)
        run = 1
        while (
            width is not None
            and index + run < len(alternatives)
            and alternatives[index + run] == _full_decade(width + run)
        ):
            run += 1
        if width is None or run == 1:
            merged.append(alternatives[index])
        else:
            merged.append(f"[1-9][0-9]{{{width},{width + run - 1}}}")
        index += run
    return merged


def whole_number_pattern(low: int, high: int) -> str:
    """A pattern for exactly the whole numbers low..high as written in decimal, no leading zero."""
    alternatives = (["0"] if low <= 0 <= high else []) + (_digit_blocks(max(low, 1), high) if high >= 1 else [])
    return "|".join(alternatives)
