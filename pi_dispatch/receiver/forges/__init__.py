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
    """Every forge package's `SPEC`, in its entry's order (the reference's): adding a forge is adding its package
    and its entry (`schema/forges/<name>.json`), which every other layer reads its words from."""
    from pi_dispatch.core.forges import FORGES
    from pi_dispatch.receiver.forges.spec import Forge

    found = []
    for module in pkgutil.iter_modules(__path__):
        if module.ispkg:
            spec = getattr(importlib.import_module(f"{__name__}.{module.name}"), "SPEC", None)
            if isinstance(spec, Forge):
                if spec.name not in FORGES:  # a forge half added: refuse to start rather than serve it half
                    raise LookupError(f"the forge package {module.name} has no entry schema/forges/{spec.name}.json")
                found.append(spec)
    return tuple(sorted(found, key=lambda forge: FORGES[forge.name].order))
