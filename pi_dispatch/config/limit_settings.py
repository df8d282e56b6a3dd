"""The worker's limits, declared once as the other settings are (`worker_settings.py` builds on these): the fleet's
job-count windows, token counter and dollar windows, shared with Node hosts on the same keys, the scoped limits
and the pause windows. A cap is each host's own setting over counters the whole fleet writes, so every host should
declare the same caps (`audit --live` shows hosts whose caps differ)."""

from __future__ import annotations

from pydantic import ValidationInfo, field_validator

from pi_dispatch.config.declaration import ENV_ONLY, WHOLE_MAX, DeclaredSettings, setting, unbounded
from pi_dispatch.config.kinds import HostFile, OptionalWhole, UsdMicros, Whole, refused
from pi_dispatch.core.budget import DEFAULT_DAILY_CAP, WindowCaps

CAP_FIX = "a whole number, 1 or more, or empty for no cap"
USD_WINDOW_HELP = (
    "Each job holds its cap in it before its container starts; past the cap a job is refused dollar-cap. Needs "
    "PI_MAX_COST_USD. Empty: not counted."
)
USD_WINDOW_FIX = "an amount such as 10.00 with PI_MAX_COST_USD set, or empty for none"


class LimitSettings(DeclaredSettings):
    """What this host may start: the windows it counts every container start in, and its scoped limits."""

    daily_cap: Whole = unbounded(
        "PI_DAILY_CAP",
        DEFAULT_DAILY_CAP,
        "Container starts a UTC day, fleet-wide (budget:YYYY-MM-DD, shared with Node hosts); past it a job is "
        "refused over-budget. The reference's default, 25, holds when nothing is set.",
        "a whole number, 1 or more (the fleet's starts a day)",
    )
    weekly_cap: OptionalWhole = setting(
        "PI_WEEKLY_CAP",
        None,
        "Container starts a UTC week (from Monday), fleet-wide. Empty: not counted.",
        CAP_FIX,
        ge=1,
        le=WHOLE_MAX,
    )
    monthly_cap: OptionalWhole = setting(
        "PI_MONTHLY_CAP",
        None,
        "Container starts a UTC month, fleet-wide. Empty: not counted.",
        CAP_FIX,
        ge=1,
        le=WHOLE_MAX,
    )
    soft_hold_pct: OptionalWhole = setting(
        "PI_SOFT_HOLD_PCT",
        None,
        "A hold band below each cap: once a window's starts pass this percentage of its cap, new jobs are refused "
        "soft-hold (the fleet's own windows only). Empty: no band.",
        "a whole number from 1 to 99, or empty for no band",
        ge=1,
        le=99,
    )
    daily_token_cap: OptionalWhole = setting(
        "PI_DAILY_TOKEN_CAP",
        None,
        "Tokens a UTC day, fleet-wide (budget:t:YYYY-MM-DD, what runs' exit lines report): once reached, jobs are "
        "refused daily-token-cap. Concurrent runs can pass it. Empty: tokens are neither counted nor capped.",
        CAP_FIX,
        ge=1,
        le=WHOLE_MAX,
    )
    max_cost_usd: UsdMicros = setting(
        "PI_MAX_COST_USD",
        None,
        "The most one job may spend, in US dollars: held in every dollar window before its container starts, "
        "handed to an image that declares costCap as PI_MAX_COST_MICROS, and settled to what the run reports when "
        "its exit line can be trusted (else the whole hold is kept). A trigger's run.maxCostUsd can only lower it. "
        "Empty: jobs are not dollar-capped, and no dollar window may be set.",
        "an amount such as 2.50, or empty for none",
    )
    daily_cost_usd: UsdMicros = setting(
        "PI_DAILY_COST_USD",
        None,
        f"US dollars a UTC day, fleet-wide (budget:usd:YYYY-MM-DD). {USD_WINDOW_HELP}",
        USD_WINDOW_FIX,
    )
    weekly_cost_usd: UsdMicros = setting(
        "PI_WEEKLY_COST_USD",
        None,
        f"US dollars a UTC week from Monday, fleet-wide. {USD_WINDOW_HELP}",
        USD_WINDOW_FIX,
    )
    monthly_cost_usd: UsdMicros = setting(
        "PI_MONTHLY_COST_USD", None, f"US dollars a UTC month, fleet-wide. {USD_WINDOW_HELP}", USD_WINDOW_FIX
    )
    scoped_limits_file: HostFile = setting(
        "PI_SCOPED_LIMITS_FILE",
        None,
        "The scoped limits (version 1 or 2 JSON): per repository or folder, caps on starts a day, week or month, on "
        "dollars (version 2) and on how many run at once, fleet-wide; per model, on dollars. Watched; a bad edit "
        "keeps the last good file. The role installs it from pi_dispatch_scoped_limits.",
        "an absolute path such as /etc/pi-dispatch/scoped-limits.json, or empty for none",
        host_var=ENV_ONLY,
    )
    pause_windows_file: HostFile = setting(
        "PI_PAUSE_WINDOWS_FILE",
        None,
        "The pause windows (JSON): times a repository's or a folder's jobs wait, delayed to the window's end. "
        "Watched; a bad edit keeps the last good file. The role installs it from pi_dispatch_pause_windows.",
        "an absolute path such as /etc/pi-dispatch/pause-windows.json, or empty for none",
        host_var=ENV_ONLY,
    )

    @field_validator("daily_cost_usd", "weekly_cost_usd", "monthly_cost_usd")
    @classmethod
    def _only_with_a_job_cap(cls, value: int | None, info: ValidationInfo) -> int | None:
        """A dollar window holds each job's cap: without PI_MAX_COST_USD there is nothing to hold (the reference
        refuses to boot too)."""
        if value is not None and "max_cost_usd" in info.data and info.data["max_cost_usd"] is None:
            raise refused("is a dollar window, and PI_MAX_COST_USD is not set: a window holds each job's cap")
        return value

    @property
    def dollar_caps(self) -> WindowCaps:
        """The fleet's dollar windows, in micro-dollars."""
        return WindowCaps.of(lambda spec: getattr(self, spec.usd_setting))

    @property
    def job_caps(self) -> WindowCaps:
        """The caps of the fleet's own job-count windows."""
        return WindowCaps.of(lambda spec: getattr(self, spec.cap_setting))
