"""How a systemd unit starts a long-running command: `pi-dispatch worker`, `receiver` or `console`, alone or with
`--env-file FILE`. Those two forms start without the command line's framework (`cli/__init__.py`): a process that
runs for months on every host pays for whatever it loads; anything else goes through the full command line, which
parses and explains it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Final

ENV_FILE_OPTION: Final = "--env-file"


def unit_invocation(arguments: Sequence[str], command: str) -> tuple[Path | None] | None:
    """`command` or `command --env-file FILE` (its env file, or None); None for anything else."""
    match list(arguments):
        case [str(name)] if name == command:
            return (None,)
        case [str(name), str(option), str(path)] if (
            name == command and option == ENV_FILE_OPTION and path and not path.startswith("-")
        ):
            return (Path(path),)
        case [str(name), str(option)] if (
            name == command and option.startswith(f"{ENV_FILE_OPTION}=") and option.partition("=")[2]
        ):
            return (Path(option.partition("=")[2]),)
    return None
