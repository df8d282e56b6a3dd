"""The few I/O primitives everything shares: bounded Valkey calls and where the store is (one URL, or the Sentinels
of a replicated one), the clock, structured logs, systemd's notify protocol and how a unit starts a command,
optional extras.
"""
