"""A receiver's deadlines and connection caps as its settings' defaults give them, for the receivers tests and
benchmarks serve in-process (production reads them from its settings: `receiver/boot.py`; the demo takes the
defaults itself)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pi_dispatch.config.receiver_settings import ReceiverSettings
from pi_dispatch.receiver.guard import ConnectionLimits


def default_limits(**changed: Any) -> ConnectionLimits:
    """The default deadlines and caps, with `changed` ones (ConnectionLimits' field names)."""
    return replace(ConnectionLimits.of(ReceiverSettings.model_construct()), **changed)
