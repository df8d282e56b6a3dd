"""What the fleet shares in the store: hosts and their heartbeat rows, the registry, the run mirror, re-homing, routed
enqueue, the inventory, liveness.
"""
