"""The worker's limits, declared once as the other settings are (`worker_settings.py` builds on these): the fleet's
job-count windows and token counter, shared with Node hosts on the same keys, the scoped limits and the pause
windows. A cap is each host's own setting over counters the whole fleet writes, so every host should declare the
same caps (`audit --live` shows hosts whose caps differ)."""

from __future__ import annotations

from pi_dispatch.config.declaration import ENV_ONLY, WHOLE_MAX, DeclaredSettings, setting, unbounded
from pi_dispatch.config.kinds import HostFile, OptionalWhole, Whole
from pi_dispatch.core.budget import DEFAULT_DAILY_CAP, WindowCaps

CAP_FIX = "a whole number, 1 or more, or empty for no cap"


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
        "PI_WEEKLY_CAP", None, "Container starts a UTC week (from Monday), fleet-wide. Empty: not counted.", CAP_FIX,
        ge=1, le=WHOLE_MAX,
    )  # fmt: skip
    monthly_cap: OptionalWhole = setting(
        "PI_MONTHLY_CAP", None, "Container starts a UTC month, fleet-wide. Empty: not counted.", CAP_FIX,
        ge=1, le=WHOLE_MAX,
    )  # fmt: skip
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
    scoped_limits_file: HostFile = setting(
        "PI_SCOPED_LIMITS_FILE",
        None,
        "The scoped limits (version 1 JSON): per repository or folder, caps on starts a day, week or month and on "
        "how many run at once, fleet-wide. Watched; a bad edit keeps the last good file. The role installs it from "
        "pi_dispatch_scoped_limits.",
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

    @property
    def job_caps(self) -> WindowCaps:
        """The caps of the fleet's own job-count windows."""
        return WindowCaps(self.daily_cap, self.weekly_cap, self.monthly_cap)
