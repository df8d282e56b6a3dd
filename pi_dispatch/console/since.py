"""`--since` and the console's `since` filter: an ISO time, or an age such as 90m, 2h or 7d, as epoch ms."""

from __future__ import annotations

from datetime import datetime

from pi_dispatch.core.errors import ConfigError, Problem
from pi_dispatch.infra.clock import wall_ms


def since_epoch_ms(text: str | None) -> int:
    """--since as epoch ms: an ISO time, or an age such as 90m, 2h or 1d."""
    if text is None:
        return 0
    units = {"m": 60_000, "h": 3_600_000, "d": 86_400_000}
    if text[-1:] in units and text[:-1].isascii() and text[:-1].isdigit():  # isdigit alone takes "²", int() not
        return wall_ms() - int(text[:-1]) * units[text[-1]]
    try:
        return int(datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        raise ConfigError(
            [Problem("--since", f"{text!r} is not a time", "command line", "give an ISO time, or an age like 2h or 1d")]
        ) from None
