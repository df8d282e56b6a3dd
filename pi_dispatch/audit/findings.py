"""What the audit reports: finding codes with their severities, a finding, a report."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Final, Literal

Severity = Literal["error", "warning", "info"]
SEVERITIES: Final[tuple[Severity, ...]] = ("error", "warning", "info")
REPORT_VERSION: Final = 1

# code -> (severity, one-line meaning), the reference table of docs/multi-host.md
CODES: Final[dict[str, tuple[Severity, str]]] = {
    "profile-undeclared": ("error", "a trigger needs a profile no host declares; every delivery is refused"),
    "profile-hosts-down": (
        "error",
        "a trigger needs a profile only down hosts declare; deliveries are refused meanwhile",
    ),
    "profile-unroutable": ("error", "only hosts without a worker name declare the profile; placement is a coin flip"),
    "needs-split": ("error", "the trigger's needs are declared, but no single host has all of them"),
    "default-profile-missing": (
        "error",
        "secrets without secretsProfile use `default`, never routed: every host needs it",
    ),
    "profile-single-host": ("warning", "only one routable host serves the trigger: a single point of failure"),
    "profile-routed": ("info", "routed to the hosts that declare the profile"),
    "profile-everywhere": ("info", "every host declares it: the shared queue load-balances"),
    "host-vars-invalid": ("error", "a host's declarations are invalid; its worker would refuse to start"),
    "provider-key-missing": ("warning", "a host holds no key for its provider: its jobs are refused before any spend"),
    "forge-credentials-missing": (
        "warning",
        "a host has no credentials for a forge the triggers fire jobs for: those jobs are refused on it",
    ),
    "job-contract-mixed": ("warning", "hosts give jobs different containers (PI_JOB_CONTRACT): a job runs by its host"),
    "worker-name-duplicate": ("error", "two hosts declare the same worker name; they would share one queue and row"),
    "profile-case-clash": ("warning", "profile names that differ only by case; a trigger naming one misses the other"),
    "store-user-shared": (
        "warning",
        "workers log in with the store's own password: one leaked env file administers the store",
    ),
    "logs-dir-shared": ("warning", "hosts share PI_LOGS_DIR; run records, raw logs and the reaper are shared too"),
    "tz-mismatch": (
        "warning",
        "hosts disagree about the timezone, so one cron pattern is two instants; cron reconcile refuses meanwhile",
    ),
    "cron-refused": ("error", "a cron entry needs a profile the host whose file holds it lacks; every run is refused"),
    "cron-shared": ("warning", "a host without a worker name schedules cron: its jobs go where any host may run them"),
    "cron-drift": ("warning", "a live host's fpCron is not what its inventory renders (another file or zone)"),
    "registry-unreachable": ("error", "the live registry could not be read"),
    "host-silent": ("warning", "an inventory host publishes no registry row"),
    "host-stale": ("warning", "a host's row is older than 45 s, so nothing is routed to it"),
    "host-stale-doctor": ("warning", "a host's row is older than five minutes"),
    "host-unknown": ("warning", "a live host is not in the inventory"),
    "caps-drift": ("error", "a host publishes other capabilities than the inventory declares"),
    "routes-drift": ("warning", "a host's routes flag disagrees with whether the inventory names it"),
    "peer-undeclared": ("warning", "a live host has peers but no declared name, so host routing is off there"),
    "digest-mismatch": ("warning", "hosts run different job image digests"),
    "version-mixed": ("warning", "live hosts run different pi-dispatch versions: a rollout is half done"),
    "row-invalid": (
        "warning",
        "a registry row breaks the contract (a bad name, a beat from the future); nobody routes to it",
    ),
    "host-not-draining": (
        "error",
        "a live host takes no job: its queue consumer is stuck, or has not polled for 45 s with slots free",
    ),
    "capable-slot-idle": (
        "warning",
        "a host had free slots while a job it could run waited on another queue past its stealing delay",
    ),
    "host-unhealthy": (
        "warning",
        "a live host takes no job by its own account (its egress proxy down, its job image gone, a folder it cannot "
        "write, Docker away): routers leave it out and its queue moves to capable peers until its beat finds it fit",
    ),
    "limits-differ": (
        "warning",
        "workers run with different caps or limit files over windows they share: the fleet stops at a different "
        "count depending on the host a job lands on",
    ),
    "spend-differs": (
        "warning",
        "live hosts cap dollars differently (their fpUsd differ, or one publishes none while another caps dollars): "
        "what a job may spend depends on the host it lands on, and a host that holds nothing leaves others' windows "
        "short",
    ),
    "egress-profile-differs": (
        "warning",
        "hosts serving one profile give its jobs different egress: what a job may reach depends on where it lands",
    ),
    "egress-public-suffix": (
        "warning",
        "an allowlist's .suffix entry covers a public suffix (github.io): anyone may receive what a job sends there",
    ),
    "runtime-missing": (
        "warning",
        "a live host's row does not list a runtime its inventory says its jobs need (runsc): its boot canary failed",
    ),
    "runsc-profile-unserved": (
        "error",
        "a profile's jobs run under runsc, and no live host both serves the profile and can run runsc",
    ),
    "host-draining": (
        "info",
        "an operator drains this host (pi-dispatch drain): it finishes what it runs and takes nothing new",
    ),
    "store-eviction": ("error", "the store may evict keys (maxmemory-policy is not noeviction): accepted jobs lost"),
    "store-no-replica": ("warning", "the store has no replica in sync: losing its machine loses every queue"),
    "store-writes-unguarded": (
        "warning",
        "the store has replicas but min-replicas-to-write 0: a primary cut off from them keeps taking writes it loses",
    ),
    "clock-skew": (
        "warning",
        "a live host's clock is further from the store's than PI_CLOCK_SKEW_MAX_MS: it takes no job until synced",
    ),
    "store-not-persistent": ("warning", "the store keeps no AOF and no snapshot: a restart loses every queue"),
    "store-reset": ("warning", "the store lost its data within the last week (the fleet's epoch was gone)"),
    "queue-silent-host": (
        "warning",
        "a named host is silent with jobs on its queue; they move to the live fleet after PI_REHOME_AFTER_MS",
    ),
}


@dataclass(frozen=True)
class Finding:
    code: str
    subject: str
    message: str
    fix: str
    hosts: tuple[str, ...] = ()
    profile: str | None = None
    trigger: str | None = None

    @property
    def severity(self) -> Severity:
        return CODES[self.code][0]

    def as_json(self) -> dict[str, Any]:
        return {"code": self.code, "severity": self.severity, **asdict(self) | {"hosts": list(self.hosts)}}


@dataclass
class Report:
    findings: list[Finding]
    live: str
    simulated_down: list[str]
    hosts: int
    triggers: int
    accepted: frozenset[str] = frozenset()  # codes the operator accepts on purpose: shown, never counted

    def count(self, severity: Severity) -> int:
        return sum(finding.severity == severity for finding in self.findings)

    def at_or_above(self, level: Severity) -> bool:
        """Whether a finding the operator has not accepted is at level or worse (the exit status)."""
        rank = SEVERITIES.index(level)
        return any(
            SEVERITIES.index(finding.severity) <= rank and finding.code not in self.accepted
            for finding in self.findings
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "version": REPORT_VERSION,
            "live": self.live,
            "simulatedDown": self.simulated_down,
            "hosts": self.hosts,
            "triggers": self.triggers,
            "summary": {severity: self.count(severity) for severity in SEVERITIES},
            "findings": [finding.as_json() for finding in self.findings],
            "accepted": sorted(self.accepted),
        }
