"""The settings of a worker's operator scripts, declared once as the other settings are (`worker_settings.py` builds
on these): the secret resolvers' and wait checks' timeouts, what they are handed of the worker's environment, and how
long and how often a wait profile may hold a job."""

from __future__ import annotations

from pydantic import field_validator

from pi_dispatch.config.declaration import DeclaredSettings, setting, unbounded
from pi_dispatch.config.kinds import EnvNames, Whole, WholeMs
from pi_dispatch.core.jscompat import DAY_MS
from pi_dispatch.core.waits import WAIT_INTERVAL_FLOOR_MS


class ScriptSettings(DeclaredSettings):
    """How this host runs its resolvers and wait checks, and how long their holds may last."""

    secret_resolve_timeout_ms: WholeMs = unbounded(
        "PI_SECRET_RESOLVE_TIMEOUT_MS", 10_000, "Per-reference secret resolver timeout."
    )
    wait_check_timeout_ms: WholeMs = unbounded("PI_WAIT_CHECK_TIMEOUT_MS", 10_000, "Per-check wait-profile timeout.")
    wait_interval_ms: WholeMs = unbounded(
        "PI_WAIT_INTERVAL_MS",
        60_000,
        f"Base re-check cadence of a held job; raised to at least {WAIT_INTERVAL_FLOOR_MS}.",
    )
    wait_max_ms: WholeMs = unbounded("PI_WAIT_MAX_MS", DAY_MS, "Longest a job may be held by its wait profiles.")
    wait_after_max_ms: WholeMs = unbounded(
        "PI_WAIT_AFTER_MAX_MS", 30 * DAY_MS, "Furthest in the future an `after` instant may be."
    )
    wait_check_slots: Whole = unbounded(
        "PI_WAIT_CHECK_SLOTS",
        1,
        "Concurrent wait checks; fleet-wide once a name is declared.",
        "a whole number, 1 or more",
    )
    wait_max_checks: Whole = unbounded(
        "PI_WAIT_MAX_CHECKS", 96, "Checks per held job before wait-expired.", "a whole number, 1 or more"
    )
    wait_max_faults: Whole = unbounded(
        "PI_WAIT_MAX_FAULTS", 5, "Consecutive check faults before wait-unanswerable.", "a whole number, 1 or more"
    )
    script_env: EnvNames = setting(
        "PI_SCRIPT_ENV",
        (),
        "Variables of the worker's environment that its resolver and wait-check scripts also get, comma separated "
        "(a vault's token, say); beside these they get only PATH, HOME, the locale and TZ, never the store's "
        "credentials (a VALKEY_ name here is never passed).",
        "environment variable names separated by commas, such as OP_SERVICE_ACCOUNT_TOKEN,VAULT_ADDR",
    )

    @field_validator("wait_interval_ms")
    @classmethod
    def _at_least_the_wait_floor(cls, value: int) -> int:
        return max(WAIT_INTERVAL_FLOOR_MS, value)
