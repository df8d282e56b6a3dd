"""The one exception family: every error names its subject, its source and the fix."""

from __future__ import annotations

from dataclasses import dataclass


class PiDispatchError(Exception):
    """Base of every error this package raises on purpose."""


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

    exit_code = 2

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(problem) for problem in self.problems))
