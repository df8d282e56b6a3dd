"""The pure core: names, keys, profiles, errors, reasons, jobs, waits, re-homing, the router and records. Standard
library only: no I/O, no clock, no environment.
"""
