"""What `audit --live` says about the store itself: a policy that may evict queues, no replica in sync, and
replicas that do not guard the primary's writes (`fleet/storeview.py` reads it)."""

from __future__ import annotations

from pi_dispatch.audit.findings import Finding
from pi_dispatch.fleet.storeview import SAFE_POLICY, StoreState


def store_findings(state: StoreState | None) -> list[Finding]:
    if state is None or state.unreadable is not None:
        return []
    found = []
    if state.eviction_policy and state.eviction_policy != SAFE_POLICY:
        found.append(
            Finding(
                "store-eviction",
                "store",
                f"maxmemory-policy is {state.eviction_policy}",
                "set maxmemory-policy noeviction (the pi_dispatch_valkey role does)",
            )
        )
    if state.in_sync == 0:
        found.append(
            Finding(
                "store-no-replica",
                "store",
                f"{len(state.replicas)} replicas, none in sync" if state.replicas else "no replica",
                "give the store replicas and Sentinels (pi_dispatch_valkey on three hosts, docs/multi-host.md §8)",
            )
        )
    elif state.min_replicas_to_write == 0:
        found.append(
            Finding(
                "store-writes-unguarded",
                "store",
                f"{state.in_sync} replicas in sync, min-replicas-to-write 0",
                "set min-replicas-to-write 1 and min-replicas-max-lag 2 (the role does with replicas)",
            )
        )
    return found
