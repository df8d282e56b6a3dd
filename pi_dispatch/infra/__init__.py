"""The few I/O primitives everything shares: bounded Valkey calls, the clock, structured logs, systemd's notify
protocol, optional extras.
"""
