"""The webhook front door: the server, its boot, routes, rules and metrics; one package per forge in forges/ (its
spec, deliveries, verification, identity and authority lookups).
"""
