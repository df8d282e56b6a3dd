"""The one exception family: every error names its subject, its source and the fix."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class ExitStatus(IntEnum):
    """What every command exits with: systemd restarts on FAILURE and not on CONFIG (RestartPreventExitStatus=2)."""

    OK = 0
    FAILURE = 1  # findings, or a runtime failure worth another try
    CONFIG = 2  # usage or configuration: nothing changes until an operator does


class PiDispatchError(Exception):
    """Base of every error this package raises on purpose."""

    exit_code: int = ExitStatus.FAILURE


@dataclass(frozen=True)
class Problem:
    """One thing wrong with one input, phrased for the operator who has to fix it."""

    subject: str
    message: str
    source: str = ""
    fix: str = ""

    def __str__(self) -> str:
        text = f"{self.subject}: {self.message}"
        if self.fix:
            text += f"; fix: {self.fix}"
        if self.source:
            text += f" (source: {self.source})"
        return text


class ConfigError(PiDispatchError):
    """Configuration that cannot be served. Carries every problem found, not just the first; exit 2."""

    exit_code = ExitStatus.CONFIG

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(problem) for problem in self.problems))
