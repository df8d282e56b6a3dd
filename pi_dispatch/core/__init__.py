"""The pure core: names, keys, profiles, errors, reasons, jobs, waits, the router and records. Standard library only:
no I/O, no clock, no environment.
"""
