"""Where a job is now: which queue holds it, in which BullMQ state, and what its hash says.

The queues asked are the shared one, every registered host's and those named by the job's own attempts (a job
stays where its host was); two round trips whatever the store holds: one to find the queues that have the job's
hash (the `present` script: thousands of EXISTS in a pipeline cost the reader far more), one for its fields and its
place in each state's list or set.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from pi_dispatch.core.keys import SHARED_QUEUE, bull_key, host_queue_name
from pi_dispatch.core.names import WORKER_NAME_RE
from pi_dispatch.core.pausewindows import PAUSED_UNTIL
from pi_dispatch.core.waits import HOLD_KEY, HoldState
from pi_dispatch.infra.valkey import KEYS_PER_SCRIPT, OP_TIMEOUT_S, bounded, per_key_script

if TYPE_CHECKING:
    import redis.asyncio as aioredis

# The states a job can be found in, and whether it is still on its way (not yet finished).
LISTS: Final = ("wait", "active", "paused")
SETS: Final = ("delayed", "prioritized", "completed", "failed", "waiting-children")
UNFINISHED: Final = frozenset({"waiting", "active", "paused", "delayed", "prioritized", "waiting-children"})
# BullMQ 5 keeps the attempts made as `atm`; a job hash an older BullMQ wrote has `attemptsMade`.
HASH_FIELDS: Final = (
    "name",
    "data",
    "opts",
    "atm",
    "attemptsMade",
    "timestamp",
    "processedOn",
    "finishedOn",
    "failedReason",
    "returnvalue",
    "progress",
)
DELAY_SCORE_SHIFT: Final = 0x1000  # BullMQ keeps a delayed job's due time in ms times 4096, plus a counter


@dataclass(frozen=True)
class Located:
    """A job as its queue holds it."""

    job_id: str
    queue: str
    state: str
    name: str | None
    data: Any
    opts: Mapping[str, Any]
    attempts_made: int
    created_ms: int | None
    processed_ms: int | None
    finished_ms: int | None
    failed_reason: str | None
    returned: Any
    due_ms: int | None  # a delayed job's next run
    locked: bool  # a worker holds it (active and beating its lock)
    progress: Any = None  # BullMQ's progress field: a paused job's `pausedUntil`

    @property
    def paused_until_ms(self) -> int | None:
        """When the pause window a delayed job waits for ends (it is due then), or None."""
        until = self.progress.get(PAUSED_UNTIL) if isinstance(self.progress, Mapping) else None
        if self.state != "delayed" or not isinstance(until, int) or isinstance(until, bool) or until != self.due_ms:
            return None
        return until

    @property
    def finished(self) -> bool:
        return self.state not in UNFINISHED

    @property
    def attempts_allowed(self) -> int:
        attempts = self.opts.get("attempts")
        return attempts if isinstance(attempts, int) and attempts > 0 else 1

    @property
    def hold(self) -> HoldState | None:
        """The wait gate's hold, when the job is held by its wait conditions."""
        if self.state != "delayed" or not isinstance(self.data, Mapping) or HOLD_KEY not in self.data:
            return None
        return HoldState.from_data(self.data[HOLD_KEY])

    @property
    def outcome(self) -> str | None:
        """A finished job's outcome and reason as its return value or failure says (`policy`, `failed`...)."""
        if isinstance(self.returned, Mapping) and isinstance(self.returned.get("outcome"), str):
            return str(self.returned["outcome"])
        return self.state if self.state in ("completed", "failed") else None


def candidate_queues(rows: Iterable[Mapping[str, object]], hosts: Iterable[object] = ()) -> list[str]:
    """The shared queue, then the queue of every registered host and of every named host, without repeats."""
    names = {str(row.get("name")) for row in rows} | {str(host) for host in hosts if isinstance(host, str)}
    return [SHARED_QUEUE, *sorted(host_queue_name(name) for name in names if WORKER_NAME_RE.fullmatch(name))]


def _text(value: object) -> str | None:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value if isinstance(value, str) else None


def _number(value: object) -> int | None:
    text = _text(value)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _json(value: object) -> Any:
    text = _text(value)
    try:
        return json.loads(text) if text is not None else None
    except ValueError:
        return None


async def locate(
    client: aioredis.Redis, job_id: str, queues: list[str], timeout_s: float = OP_TIMEOUT_S
) -> list[Located]:
    """Every queue that holds this job id (one, unless a job id was reused across queues), with its state."""
    parts = await bounded(per_key_script(client, "present", [bull_key(queue, job_id) for queue in queues]), timeout_s)
    holding = [queues[at * KEYS_PER_SCRIPT + position - 1] for at, part in enumerate(parts) for position in part]
    if not holding:
        return []
    pipe = client.pipeline(transaction=False)
    for queue in holding:
        pipe.hmget(bull_key(queue, job_id), list(HASH_FIELDS))
        for name in LISTS:
            pipe.lpos(bull_key(queue, name), job_id)
        for name in SETS:
            pipe.zscore(bull_key(queue, name), job_id)
        pipe.exists(bull_key(queue, f"{job_id}:lock"))
    answers = await bounded(pipe.execute(raise_on_error=False), timeout_s)
    width = 2 + len(LISTS) + len(SETS)
    return [_located(job_id, queue, answers[at * width : (at + 1) * width]) for at, queue in enumerate(holding)]


def _located(job_id: str, queue: str, answers: list[Any]) -> Located:
    fields = dict(
        zip(HASH_FIELDS, answers[0] if isinstance(answers[0], list) else [None] * len(HASH_FIELDS), strict=True)
    )
    places = dict(zip((*LISTS, *SETS), answers[1 : 1 + len(LISTS) + len(SETS)], strict=True))
    state = next((name for name in (*LISTS, *SETS) if places[name] is not None and places[name] is not False), None)
    score = places["delayed"]
    scored = isinstance(score, int | float) and not isinstance(score, bool)
    due = int(float(score)) // DELAY_SCORE_SHIFT if scored else None
    opts = _json(fields["opts"])
    return Located(
        job_id=job_id,
        queue=queue,
        state={"wait": "waiting", None: "unknown"}.get(state, state or "unknown"),
        name=_text(fields["name"]),
        data=_json(fields["data"]),
        opts=opts if isinstance(opts, Mapping) else {},
        attempts_made=_number(fields["atm"]) or _number(fields["attemptsMade"]) or 0,
        created_ms=_number(fields["timestamp"]),
        processed_ms=_number(fields["processedOn"]),
        finished_ms=_number(fields["finishedOn"]),
        failed_reason=_text(fields["failedReason"]),
        returned=_json(fields["returnvalue"]),
        due_ms=due,
        locked=bool(answers[-1]) and not isinstance(answers[-1], BaseException),
        progress=_json(fields["progress"]),
    )
