"""The few I/O primitives everything shares: bounded Valkey calls, the one error an outage raises, and where the
store is (one URL, or the Sentinels of a replicated one), the supervisor of long-running loops, BullMQ's internals
behind one adapter, the clock, structured logs, systemd's notify protocol and how a unit starts a command,
optional extras.
"""
