"""The retry of a forge's identity at boot, which every forge's access shares. Each forge's own calls are in its
package (`forges/<forge>/access.py`); what the worker shares with them (a call, an id, a segment) in `forgeapi/`.

An identity is resolved once at boot, retried inside a window when the forge does not answer: waits of 5, 10 and
20 s, then 30 s each, the last shortened so a final try lands at the window's end; each try cut off after 10 s. A
determinate refusal stops at once (a config error, exit 2); an exhausted window exits 1.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

from pi_dispatch.forgeapi.errors import ForgeCallError
from pi_dispatch.infra.events import EventLog

RETRY_WAITS_MS: Final = (5_000, 10_000, 20_000)
RETRY_WAIT_MS: Final = 30_000
ATTEMPT_CUTOFF_S: Final = 10.0


Sleep = Callable[[float], Awaitable[None]]


async def with_retry(
    forge: str,
    attempt: Callable[[], Awaitable[Any]],
    window_ms: float,
    log: EventLog,
    *,
    sleep: Sleep = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
    cutoff_s: float = ATTEMPT_CUTOFF_S,
) -> Any:
    """The attempt's answer, retried on transient failures until window_ms has passed since the first try."""
    if not isinstance(window_ms, int | float) or not math.isfinite(window_ms) or window_ms <= 0:
        raise ValueError("the identity retry window must be a positive, finite number of milliseconds")
    deadline = clock() * 1000 + window_ms
    tries = 0
    while True:
        tries += 1
        try:
            return await asyncio.wait_for(attempt(), cutoff_s)
        except TimeoutError:
            error = ForgeCallError(f"no answer within {cutoff_s:g} s", transient=True)
        except ForgeCallError as refused:
            if not refused.transient:
                raise
            error = refused
        except Exception as unexpected:  # broad, as the reference: any failure of a try is retried, then reported
            error = ForgeCallError(type(unexpected).__name__, transient=True)
        detail = {"status": error.status, "requestId": error.request_id} if forge == "github" else {}
        remaining = deadline - clock() * 1000
        if remaining <= 0:
            log(
                "identity_retry_exhausted",
                {"forge": forge, "attempts": tries, "windowMs": window_ms, "reason": error.reason, **detail},
            )
            raise error
        delay = min(RETRY_WAITS_MS[tries - 1] if tries <= len(RETRY_WAITS_MS) else RETRY_WAIT_MS, remaining)
        log("identity_retry", {"forge": forge, "attempt": tries, "reason": error.reason, "delayMs": delay, **detail})
        await sleep(delay / 1000)
