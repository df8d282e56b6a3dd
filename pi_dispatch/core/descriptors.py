"""How many open files a receiver needs for the connections it is allowed to hold: the unit's LimitNOFILE and the
limit the receiver raises itself to at boot, declared once for both."""

from __future__ import annotations

from typing import Final

# Descriptors beyond the connections: the store's and the forges' connections, the triggers watch, the health port.
DESCRIPTOR_HEADROOM: Final = 256


def descriptors_needed(max_connections: int) -> int:
    """The open-file limit a receiver allowed max_connections needs."""
    return max_connections + DESCRIPTOR_HEADROOM
