"""The re-homing threshold: how long a named host may be silent before its queue's jobs move to the live fleet.

Declared here, below the settings, so that an operator's read (`top`, `hosts`) knows it without loading the
settings' validation. `PI_REHOME_AFTER_MS` (`config/worker_settings.py`) defaults to it and is raised to the floor.
Pure.
"""

from __future__ import annotations

from typing import Final

REHOME_AFTER_MS: Final = 120_000
REHOME_FLOOR_MS: Final = 10_000


def rehome_after_ms(declared: object) -> int:
    """The re-homing threshold a host runs with, from what its inventory declares (the default when nothing)."""
    value = declared if isinstance(declared, int) and not isinstance(declared, bool) else None
    return max(REHOME_FLOOR_MS, value if value is not None else REHOME_AFTER_MS)
