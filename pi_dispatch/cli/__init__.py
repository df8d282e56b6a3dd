"""The `pi-dispatch` command line: the typer app, one module per command group; a worker, a receiver and a console
start without the rest of it, their footprint being paid for months (`infra/units.py`).
"""

from __future__ import annotations

import sys


def main() -> None:
    from pi_dispatch.core.errors import PiDispatchError
    from pi_dispatch.infra.units import unit_invocation

    arguments = sys.argv[1:]
    if (invocation := unit_invocation(arguments, "worker")) is not None:
        from pi_dispatch.worker.entry import run
    elif (invocation := unit_invocation(arguments, "receiver")) is not None:
        from pi_dispatch.receiver.entry import run
    elif (invocation := unit_invocation(arguments, "console")) is not None:
        from pi_dispatch.web.entry import run
    else:
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
