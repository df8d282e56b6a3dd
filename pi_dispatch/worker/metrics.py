"""The worker's Prometheus metrics (prometheus-client), served on PI_METRICS_ADDR.

Job counts come from the worker's own event stream (`observe` wraps its EventLog), so a count and the log line
that tells of it cannot disagree. Timings, gauges and queue depths are set where they are measured. With no
address the worker keeps no metrics at all: each hook returns at once.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from pi_dispatch.core.runusage import RunUsage
from pi_dispatch.infra.events import EventLog
from pi_dispatch.infra.metrics import new_registry
from pi_dispatch.infra.valkey import STORE_FAULTS, describe

if TYPE_CHECKING:
    from pi_dispatch.fleet.limitview import WindowUse

# How the worker's log names an attempt's end, and the outcome label each one counts under.
OUTCOME_EVENTS: Final = {
    "job_done": None,  # the event's own outcome says which: completed, or a refusal returned as a policy outcome
    "job_unreadable": "refused",  # failed unread: its stored data cannot be parsed
    "job_failed": "failed",
    "job_held": "held",
    "job_put_back": "put_back",
}
DONE_OUTCOMES: Final = {"completed": "completed", "policy": "refused", "failed": "failed"}
QUEUE_STATES: Final = ("waiting", "delayed", "active", "prioritized", "failed")
DURATION_BUCKETS: Final = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, float("inf"))
GATE_BUCKETS: Final = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, float("inf"))
MAX_LABEL_VALUES: Final = 64  # a label's values from job data or a job's output: bounded, so a job cannot flood them
LABEL_VALUE_RE: Final = re.compile(r"[A-Za-z0-9@~][A-Za-z0-9._:/@~+-]{0,99}")


@dataclass
class BoundedLabels:
    """Label values a job chose (its flow, the models its runner named): each well formed and at most `most` of a
    kind; anything else is `other`."""

    most: int
    seen: dict[str, set[str]] = field(default_factory=dict)

    def of(self, kind: str, value: object) -> str:
        known = self.seen.setdefault(kind, set())
        if not isinstance(value, str) or not LABEL_VALUE_RE.fullmatch(value):
            return "other"
        if value not in known and len(known) >= self.most:
            return "other"
        known.add(value)
        return value


@dataclass
class WorkerMetrics:
    """Every metric the worker exposes, in a registry of its own. `enabled=False` keeps nothing."""

    enabled: bool = True
    registry: Any = None
    _server: Any = field(default=None, repr=False)
    _labels: BoundedLabels = field(default_factory=lambda: BoundedLabels(MAX_LABEL_VALUES), repr=False)

    def __post_init__(self) -> None:
        if not self.enabled:
            return
        from prometheus_client import Counter, Gauge, Histogram

        self.registry = new_registry("worker")
        registry = self.registry
        self.jobs = Counter(
            "pi_dispatch_jobs", "Attempts by how they ended.", ["queue", "outcome", "reason"], registry=registry
        )
        self.duration = Histogram(
            "pi_dispatch_job_duration_seconds",
            "A job container's run, from start to end.",
            ["outcome"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.running = Gauge("pi_dispatch_running_jobs", "Job containers running now.", registry=registry)
        self.slots = Gauge(
            "pi_dispatch_slots", "Containers this host runs at once (PI_CONCURRENCY).", registry=registry
        )
        self.queue_jobs = Gauge(
            "pi_dispatch_queue_jobs",
            "Jobs in this host's queues by state, read each beat.",
            ["queue", "state"],
            registry=registry,
        )
        self.last_beat = Gauge(
            "pi_dispatch_last_beat_timestamp_seconds",
            "When the registry last took this host's beat.",
            registry=registry,
        )
        self.last_poll = Gauge(
            "pi_dispatch_last_poll_timestamp_seconds",
            "When a queue consumer last asked the store for a job.",
            registry=registry,
        )
        self.draining = Gauge(
            "pi_dispatch_draining", "1 while an operator drains this host (pi-dispatch drain).", registry=registry
        )
        self.clock_offset = Gauge(
            "pi_dispatch_clock_offset_seconds",
            "The store's clock minus this host's, measured with TIME each beat (past PI_CLOCK_SKEW_MAX_MS the host "
            "takes no job and does not re-home).",
            registry=registry,
        )
        self.mirror_failures = Counter(
            "pi_dispatch_mirror_failures", "Run records the fleet mirror did not take.", registry=registry
        )
        self.egress_refusals = Counter(
            "pi_dispatch_egress_refusals",
            "Connections the egress proxy refused this host's jobs, by the job's secret profile (none: empty).",
            ["profile"],
            registry=registry,
        )
        self.steals = Counter(
            "pi_dispatch_steals", "Jobs this host took from a busy peer's own queue (work stealing).", registry=registry
        )
        self.store_resets = Counter(
            "pi_dispatch_store_resets",
            "Times this worker found the store had lost its data (fleet:epoch gone) and re-created what it owns.",
            registry=registry,
        )
        self.idle_capable = Counter(
            "pi_dispatch_idle_capable_slot_seconds",
            "Free slot-seconds of this host while a job it could run waited on a peer's queue.",
            registry=registry,
        )
        self.store_replicas = Gauge(
            "pi_dispatch_store_replicas_in_sync",
            "Replicas of the store in sync with it (acknowledged within 2 s), read each beat.",
            registry=registry,
        )
        self.store_lag = Gauge(
            "pi_dispatch_store_replication_lag_seconds",
            "The store's most lagging replica, read each beat.",
            registry=registry,
        )
        self.store_primary = Gauge(
            "pi_dispatch_store_is_primary", "1 when the node this worker writes to is a primary.", registry=registry
        )
        self.store_promoted = Gauge(
            "pi_dispatch_store_promoted",
            "1 when the primary took over from another since it started (a failover happened).",
            registry=registry,
        )
        self.run_tokens = Counter(
            "pi_dispatch_run_tokens",
            "Tokens runs' exit lines reported, by flow and model (at most 64 of each; the rest `other`).",
            ["flow", "model"],
            registry=registry,
        )
        self.run_cost = Counter(
            "pi_dispatch_run_cost_dollars",
            "What runs' exit lines said they cost in US dollars (the runner's meter), by flow and model.",
            ["flow", "model"],
            registry=registry,
        )
        self.dollars_settled = Counter(
            "pi_dispatch_dollars_settled_micros",
            "Micro-dollars runs' dollar holds settled to (what the dollar windows keep of each run), by flow, model "
            "and basis: metered (the trusted exit line's cost) or floor (the whole hold: untrusted, incomplete, or "
            "a dead worker's hold swept).",
            ["flow", "model", "basis"],
            registry=registry,
        )
        self.limit_used = Gauge(
            "pi_dispatch_limit_used",
            "Each limit window's count now (ledger budget: the fleet's starts; budget:t: tokens; budget:s:<hash16>: a "
            "scope's), read each beat.",
            ["ledger", "window"],
            registry=registry,
        )
        self.limit_cap = Gauge(
            "pi_dispatch_limit_cap", "Each capped window's cap on this host.", ["ledger", "window"], registry=registry
        )
        self.gate_duration = Histogram(
            "pi_dispatch_gate_duration_seconds",
            "Pre-spend gates: secret resolution and wait checks.",
            ["gate"],
            buckets=GATE_BUCKETS,
            registry=registry,
        )

    def observe(self, log: EventLog) -> EventLog:
        """The event log, counting each attempt's end (and each mirror failure) as it goes by."""
        if not self.enabled:
            return log

        def counted(event: str, fields: Mapping[str, object]) -> None:
            log(event, fields)
            if event in OUTCOME_EVENTS:
                outcome = OUTCOME_EVENTS[event] or DONE_OUTCOMES.get(str(fields.get("outcome")), "completed")
                labels = (str(fields.get("queue", "")), outcome, str(fields.get("reason") or ""))
                self.jobs.labels(*labels).inc()
            elif event == "run_mirror_failed":
                self.mirror_failures.inc()
            elif event == "egress_refused":
                self.egress_refusals.labels(str(fields.get("profile") or "")).inc()
            elif event == "job_stolen":
                self.steals.inc()
            elif event == "store_reset":
                self.store_resets.inc()
            elif event in ("dollar_settled", "dollar_hold_swept"):
                self._settled(fields)

        return counted

    def _settled(self, fields: Mapping[str, object]) -> None:
        micros = fields.get("settledMicros")
        if isinstance(micros, int) and micros > 0:
            flow, model = self._labels.of("flow", fields.get("flow")), self._labels.of("model", fields.get("model"))
            self.dollars_settled.labels(flow, model, str(fields.get("basis"))).inc(micros)

    @contextlib.contextmanager
    def timed_gate(self, gate: str) -> Iterator[None]:
        if not self.enabled:
            yield
            return
        started = time.perf_counter()
        try:
            yield
        finally:
            self.gate_duration.labels(gate).observe(time.perf_counter() - started)

    def ran(self, outcome: str, seconds: float) -> None:
        """A container's run, under the outcome label `pi_dispatch_jobs_total` counts it by."""
        if self.enabled:
            self.duration.labels(DONE_OUTCOMES.get(outcome, outcome)).observe(seconds)

    def used(self, flow: object, usage: RunUsage) -> None:
        """A run's tokens and cost as its exit line said them: per model from its ledger, else as one total."""
        if not self.enabled:
            return
        flow_label = self._labels.of("flow", flow)
        models = (usage.usage or {}).get("models") or []
        if models:
            for row in models:
                model = self._labels.of("model", f"{row.get('provider')}/{row.get('model')}")
                self.run_tokens.labels(flow_label, model).inc(max(0, row.get("total") or 0))
                self.run_cost.labels(flow_label, model).inc(max(0, row.get("cost") or 0))
        elif usage.tokens is not None:
            self.run_tokens.labels(flow_label, "unknown").inc(max(0, usage.total_tokens or 0))
            cost = usage.tokens.get("cost")
            self.run_cost.labels(flow_label, "unknown").inc(cost if isinstance(cost, int | float) and cost > 0 else 0)

    def limits(self, uses: Sequence[WindowUse]) -> None:
        """Each window's count and this host's cap, as read this beat."""
        if self.enabled:
            for use in uses:
                self.limit_used.labels(use.ledger, use.window).set(use.used)
                if use.cap is not None:
                    self.limit_cap.labels(use.ledger, use.window).set(use.cap)

    def idled(self, slot_seconds: float) -> None:
        if self.enabled:
            self.idle_capable.inc(slot_seconds)

    def live(self, running: Callable[[], int], slots: int, draining: Callable[[], bool]) -> None:
        """Gauges read when scraped: the containers running now, the slots, and whether the host is drained."""
        if self.enabled:
            self.running.set_function(running)
            self.slots.set(slots)
            self.draining.set_function(lambda: float(draining()))

    def clock(self, offset_ms: Callable[[], int]) -> None:
        """The clock offset gauge, read when scraped."""
        if self.enabled:
            self.clock_offset.set_function(lambda: offset_ms() / 1000)

    def beat(self, at_s: float) -> None:
        if self.enabled:
            self.last_beat.set(at_s)

    def polled(self, at_s: float) -> None:
        if self.enabled and at_s:
            self.last_poll.set(at_s)

    async def measure(self, client: Any, queues: Sequence[str], last_beat_ms: int, last_poll_ms: int) -> None:
        """What is read once a beat: the last beat and poll, and this host's queues' depths (bounded)."""
        from pi_dispatch.fleet.rehome import queue_counts
        from pi_dispatch.fleet.storeview import read_store_state

        self.beat(last_beat_ms / 1000)
        self.polled(last_poll_ms / 1000)
        state = await read_store_state(client)
        if state.unreadable is None:
            self.store_replicas.set(state.in_sync)
            self.store_lag.set(state.max_lag_s or 0)
            self.store_primary.set(float(state.role == "master"))
            self.store_promoted.set(float(state.promoted))
        for queue in queues:
            with contextlib.suppress(*STORE_FAULTS):  # an unreachable store leaves the last depths in place
                self.depth(queue, (await queue_counts(client, queue)).by_state())

    def depth(self, queue: str, counts: Mapping[str, int]) -> None:
        if self.enabled:
            for state, count in counts.items():
                self.queue_jobs.labels(queue, state).set(count)

    def start(
        self, address: str, running: Callable[[], int], slots: int, draining: Callable[[], bool], log: EventLog
    ) -> None:
        """Serve on address (empty: not at all); a taken port costs the metrics, never the worker."""
        if not address:
            return
        self.live(running, slots, draining)
        try:
            self.serve(address)
        except OSError as error:
            log("metrics_unavailable", {"reason": describe(error)})
            return
        log("metrics_serving", {"address": address})

    def serve(self, address: str) -> None:
        """Expose /metrics on host:port (a thread of prometheus-client's own server)."""
        if not self.enabled:
            return
        from prometheus_client import start_http_server

        host, _, port = address.rpartition(":")
        self._server, _ = start_http_server(int(port), host.strip("[]"), registry=self.registry)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
