"""What a job may be before the worker spends anything on it: its size, its depth, its strings.

A job's data comes from whoever can write to the store. It is walked once, without recursion (a job nested
thousands deep must not exhaust the interpreter's stack), and refused as a policy outcome when it is larger
than a delivery can make it, deeper than any job needs, or holds an over-long string or key. Refusals are
returned and recorded like the gates', never retried. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from pi_dispatch.core.reasons import Reason

# A job is a projection of one delivery, whose body the receiver caps at 2 MiB.
MAX_JOB_CHARS: Final = 2 * 1024 * 1024
# A forge's longest text (an issue or comment body) is 65,536 characters; four times that is never legitimate.
MAX_STRING_CHARS: Final = 256 * 1024
MAX_KEY_CHARS: Final = 256
MAX_DEPTH: Final = 32


def job_refusal(data: object) -> Reason | None:
    """Why the job's data is refused outright, or None. Stops at the first bound it breaks."""
    total = 0
    stack: list[tuple[object, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            if len(value) > MAX_STRING_CHARS:
                return Reason.JOB_TOO_LARGE
            total += len(value) + 2
        elif isinstance(value, Mapping | list | tuple):
            if depth > MAX_DEPTH:
                return Reason.JOB_TOO_DEEP
            if isinstance(value, Mapping):
                for key, item in value.items():
                    if not isinstance(key, str) or len(key) > MAX_KEY_CHARS:
                        return Reason.JOB_TOO_LARGE
                    total += len(key) + 3
                    stack.append((item, depth + 1))
            else:
                stack.extend((item, depth + 1) for item in value)
            total += 2
        else:
            total += 8  # a number, a boolean or null
        if total > MAX_JOB_CHARS:
            return Reason.JOB_TOO_LARGE
    return None
