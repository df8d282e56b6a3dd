"""The few I/O primitives everything shares: bounded Valkey calls, the clock, structured logs, systemd's notify
protocol and how a unit starts a command, optional extras.
"""
