"""The `pi-dispatch` command line: the typer app, one module per command group; a worker starts without the rest
of it, its footprint being paid on every host (`worker/entry.py`).
"""

from __future__ import annotations

import sys


def main() -> None:
    from pi_dispatch.core.errors import PiDispatchError
    from pi_dispatch.worker.entry import plain_invocation, run

    if (invocation := plain_invocation(sys.argv[1:])) is None:
        from pi_dispatch.cli.app import main as full

        full()
        return
    try:
        status = run(*invocation)
    except PiDispatchError as error:
        from pi_dispatch.cli.app import report

        report(error)
    sys.exit(status)


__all__ = ["main"]
