"""What `audit --live` says about the store itself: a policy that may evict queues, no replica in sync, replicas
that do not guard the primary's writes, no persistence, and a recent loss of its data (`fleet/storeview.py` reads
it; the loss is the fleet's epoch, `fleet/storereset.py`)."""

from __future__ import annotations

from typing import Final

from pi_dispatch.audit.findings import Finding
from pi_dispatch.core.jscompat import iso_string
from pi_dispatch.fleet.storeview import SAFE_POLICY, StoreState

RESET_RECENT_MS: Final = 7 * 86_400_000  # a loss older than a week is history, not a finding


def store_findings(state: StoreState | None, now_ms: int) -> list[Finding]:
    if state is None or state.unreadable is not None:
        return []
    found = _data_findings(state, now_ms)
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


def _data_findings(state: StoreState, now_ms: int) -> list[Finding]:
    """Whether the store keeps its data across a restart, and whether it lost it lately."""
    found = []
    if state.persistence == "off":
        found.append(
            Finding(
                "store-not-persistent",
                "store",
                "appendonly no and no save points",
                "set appendonly yes and appendfsync everysec (the pi_dispatch_valkey role does)",
            )
        )
    epoch = state.epoch
    if epoch is not None and epoch.resetAt is not None and now_ms - epoch.resetAt <= RESET_RECENT_MS:
        found.append(
            Finding(
                "store-reset",
                "store",
                f"lost its data at {iso_string(epoch.resetAt)} ({epoch.resets} times since {iso_string(epoch.since)})",
                "find why it restarted empty and keep persistence on; queued jobs went with it, rows and cron "
                "schedulers were re-created by the workers",
            )
        )
    return found
