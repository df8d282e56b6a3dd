"""The optional parts of the install, and the exact command that adds a missing one to this very install.

A worker host installs `pi-dispatch` alone: the worker, `config check|show` and the operator's reads. The
controller adds `[controller]` (Ansible's inventory loader: `config render`, `audit`); a try-out machine adds
`[demo]` (an embedded Valkey and the example fleet). A command whose extra is missing exits 2 and says how to
add it, in the form this install came from (an index, a wheel file, a checkout, an editable checkout).
"""

from __future__ import annotations

import importlib.util
import json
import shlex
import sys
from importlib import metadata
from typing import Final
from urllib.parse import unquote, urlsplit

from pi_dispatch import __version__
from pi_dispatch.core.errors import ConfigError, Problem

DISTRIBUTION: Final = "pi-dispatch"
EXTRAS: Final = {
    "console": "the web console's templates",
    "controller": "Ansible's inventory loader",
    "demo": "the embedded Valkey and the example fleet",
    "receiver": "the webhook receiver's HTTP server and client, JWT signing and file watching",
}


def _origin() -> tuple[str, bool] | None:
    """Where this install came from (a local path) and whether it is editable, per PEP 610; None for an index."""
    try:
        text = metadata.distribution(DISTRIBUTION).read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    if not text:
        return None
    try:
        direct = json.loads(text)
    except ValueError:
        return None
    url = urlsplit(str(direct.get("url", "")))
    if url.scheme != "file":
        return None
    editable = bool(direct.get("dir_info", {}).get("editable"))
    return unquote(url.path), editable


def install_line(extra: str) -> str:
    """The pip command that adds an extra to the install this process runs from."""
    origin = _origin()
    if origin is None:
        target, editable = f"{DISTRIBUTION}[{extra}]=={__version__}", False
    else:
        target, editable = f"{origin[0]}[{extra}]", origin[1]
    return shlex.join([sys.executable, "-m", "pip", "install", *(["-e"] if editable else []), target])


def require(extra: str, module: str) -> None:
    """Raise a ConfigError (exit 2) naming the extra and the line that installs it, when module is missing."""
    if importlib.util.find_spec(module) is None:
        raise ConfigError(
            [
                Problem(
                    f"the {extra} extra",
                    f"is not installed ({EXTRAS[extra]}: Python module {module!r})",
                    "this install",
                    install_line(extra),
                )
            ]
        )
