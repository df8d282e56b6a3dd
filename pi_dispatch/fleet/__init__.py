"""What the fleet shares in the store: hosts and their heartbeat rows, the registry, the run mirror, re-homing, work
stealing and the atomic job move both use, routed enqueue, the inventory, liveness, the backlog each host could run,
and the store's own state (its replicas, its guard, its failovers).
"""
