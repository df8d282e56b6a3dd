"""Every Valkey key and BullMQ queue name the fleet shares with the Node reference, in one place."""

from __future__ import annotations

from typing import Final

from pi_dispatch.core.names import WORKER_NAME_RE

HOST_LIVE: Final = "host:live"
HOST_ROW_PREFIX: Final = "host:h:"
RUNS_INDEX: Final = "runs:index"
RUN_RECORD_PREFIX: Final = "runs:rec:"
SHARED_QUEUE: Final = "pi-jobs"
BULL_PREFIX: Final = "bull"
WAIT_CHECK_LEASE_PREFIX: Final = "wait:check:"
# The limits the fleet shares with Node hosts (`core/budget.py`): job-count windows `budget:<day>`, `budget:w:<Monday>`,
# `budget:m:<month>`, the token counter `budget:t:<day>`, each scope's ledger `budget:s:<hash16>` with the same
# windows, and a scope's fleet-wide concurrency leases `slot:s:<hash16>:<i>`.
BUDGET_PREFIX: Final = "budget"
SCOPE_SLOT_PREFIX: Final = "slot:s:"
# This port's own keys (a Node fleet neither reads nor writes them): the re-homing lease, and since when each
# named host has been seen without a live row.
REHOME_LEASE: Final = "rehome:lease"
REHOME_SINCE_PREFIX: Final = "rehome:since:"
# Hosts whose row went away (expired, or removed by a worker that stopped), by when: what a re-home sweep reads
# beside the rows; and the registry as one elected reader read it this beat, with the lease on reading it.
REHOME_SILENT: Final = "rehome:silent"
REHOME_SCAN: Final = "rehome:scan"  # held while a sweep's SCAN for unregistered host queues is not due again
HOST_SNAPSHOT: Final = "host:snapshot"
HOST_SNAPSHOT_LEASE: Final = "host:snapshot:lease"
# Host queues with jobs waiting, scored by when their host first saw the backlog: where idle peers steal from.
STEAL_OFFERS: Final = "steal:offers"
# This port's own job history and control, keyed by a job's record stem (`names.record_stem`): every attempt's
# record, each attempt's masked output, a job's cancel and a host's drain (facts, so a restart keeps them), and
# the channel that tells the workers of a new fact at once.
RUN_ATTEMPTS_PREFIX: Final = "runs:att:"
JOB_LOG_PREFIX: Final = "runs:log:"
# Run records a worker's disk refused, by record stem, kept here until the file is written (a hash per host).
RUN_SPILL_PREFIX: Final = "runs:spill:"
CANCEL_PREFIX: Final = "control:cancel:"
DRAIN_PREFIX: Final = "control:drain:"
# The names of the hosts with a drain fact, set in the same transaction as the fact: what every router reads beside
# the registry's snapshot, so a drain or a resume reaches routing at once rather than at the host's next beat.
DRAINED_HOSTS: Final = "control:drained"
CONTROL_CHANNEL: Final = "control:events"
# This port's own: the fleet's epoch in the store, written once (and again only after the store lost its data), so
# a store that comes back empty is noticed (`fleet/storereset.py`).
FLEET_EPOCH: Final = "fleet:epoch"
# This port's own: one hash, a field per receiver (`host:port`) holding its spool's state as JSON, so `top` reads
# every receiver in one HGETALL (`fleet/receivers.py`).
RECEIVERS: Final = "fleet:receivers"
# This port's own: every action an operator took (cancel, retry, drain, resume), a capped stream (`fleet/trail.py`).
TRAIL_KEY: Final = "actions:trail"


def delivery_seen_key(digest: str) -> str:
    """This port's: a signed delivery's signature (its SHA-256) the receiver has seen, holding the first delivery
    id it came with, for the deduplication window (`receiver/replay.py`)."""
    return f"recv:seen:{digest}"


def host_row_key(worker_name: str) -> str:
    """The hash holding one host's self-description."""
    return f"{HOST_ROW_PREFIX}{worker_name}"


def rehome_since_key(worker_name: str) -> str:
    """Since when (epoch ms) a named host has been seen without a live registry row."""
    return f"{REHOME_SINCE_PREFIX}{worker_name}"


def bull_key(queue: str, suffix: str) -> str:
    """One of BullMQ's keys for a queue (`wait`, `delayed`, `marker`, ...), or a job's hash by its id."""
    return f"{BULL_PREFIX}:{queue}:{suffix}"


def run_record_key(sanitized_job_id: str) -> str:
    """One mirrored run record's bytes."""
    return f"{RUN_RECORD_PREFIX}{sanitized_job_id}"


def run_spill_key(worker_name: str) -> str:
    """A HASH of the run records this host's disk refused, by record stem, until each file is written."""
    return f"{RUN_SPILL_PREFIX}{worker_name}"


def run_attempts_key(sanitized_job_id: str) -> str:
    """A LIST of the job's attempt records, oldest first (the mirror's `runs:rec:` holds only the last)."""
    return f"{RUN_ATTEMPTS_PREFIX}{sanitized_job_id}"


def job_log_key(sanitized_job_id: str, attempt: int) -> str:
    """A STREAM of one attempt's masked output: a start entry, chunks of output, an end entry."""
    return f"{JOB_LOG_PREFIX}{sanitized_job_id}:{attempt}"


def cancel_key(sanitized_job_id: str) -> str:
    """The fact that an operator cancelled this job: whichever worker meets it next stops it."""
    return f"{CANCEL_PREFIX}{sanitized_job_id}"


def drain_key(worker_name: str) -> str:
    """The fact that this host is draining: it takes nothing new until it is resumed."""
    return f"{DRAIN_PREFIX}{worker_name}"


def host_queue_name(worker_name: str) -> str:
    """The queue a host with a declared name drains besides the shared one."""
    return f"{SHARED_QUEUE}@{worker_name}"


def worker_of_queue(queue_name: str) -> str | None:
    """The worker a host queue belongs to, or None when the name is not a legal host queue."""
    head, at, name = queue_name.partition("@")
    if head != SHARED_QUEUE or not at or WORKER_NAME_RE.fullmatch(name) is None:
        return None
    return name


HOST_QUEUE_META_PATTERN: Final = f"{BULL_PREFIX}:{SHARED_QUEUE}@*:meta"


def queue_of_meta_key(key: str) -> str | None:
    """The host queue a `bull:pi-jobs@<name>:meta` key belongs to, when the name is legal."""
    head = f"{BULL_PREFIX}:"
    if not key.startswith(head) or not key.endswith(":meta"):
        return None
    queue = key[len(head) : -len(":meta")]
    return queue if worker_of_queue(queue) is not None else None
