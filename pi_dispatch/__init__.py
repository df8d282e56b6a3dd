"""pi-dispatch: a Python fleet for the pi coding agent that shares one Valkey with the Node reference."""

__version__ = "0.1.0"
