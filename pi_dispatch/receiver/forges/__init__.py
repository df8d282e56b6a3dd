"""The forges: each one a package here (its spec in `__init__`, its deliveries in `routes`, its calls in `access`),
found by being here, and what they share (the request checks, the forge API client, authority and identity).
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pi_dispatch.receiver.forges.spec import Forge


@cache
def registered() -> tuple[Forge, ...]:
    """Every forge package's `SPEC`, in the reference's order: adding a forge is adding its package."""
    from pi_dispatch.receiver.forges.spec import Forge

    found = []
    for module in pkgutil.iter_modules(__path__):
        if module.ispkg:
            spec = getattr(importlib.import_module(f"{__name__}.{module.name}"), "SPEC", None)
            if isinstance(spec, Forge):
                found.append(spec)
    return tuple(sorted(found, key=lambda forge: forge.order))
