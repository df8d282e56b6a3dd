"""One host's worker: its lifecycle, its assembly and upkeep, slot-gated pickup, attempts, queue consumers,
containers, secret and wait gates, job folders, run records, fencing, one-shots, cron schedulers, metrics.
"""
