"""pi-dispatch: a Python fleet for the pi coding agent that shares one Valkey with the Node reference."""

__version__ = "0.1.0"
# The Node reference this release shares a store with: same keys, rows, queues, job data and routing decision.
REFERENCE_PACKAGE = "@edgehero/pi-dispatch"
REFERENCE_VERSION = "1.8.0"
REFERENCE = f"{REFERENCE_PACKAGE} {REFERENCE_VERSION}"
