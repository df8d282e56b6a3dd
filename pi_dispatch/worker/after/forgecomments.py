"""What goes back to the forge after a job's attempt, as a Node host sends it: one fixed-text comment on the issue
or pull request for a refusal or a stop the reference comments on (`core/forgecomments.py`), and one for BullMQ's
final failure; nothing for a completed run (the agent posts its own status) or an attempt that will be retried.

Each comment mints its own token and is posted in the background, bounded by the forge client's timeout; a comment
that fails is logged `comment_failed` and dropped, never retried and never the job's failure. A local job's comment
has nowhere to go: it is logged `comment` with its fixed text. A stop closes what is still being posted.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from pi_dispatch.core.forgecomments import FINAL_FAILURE, TEXTS, comment_text
from pi_dispatch.core.jobs import FORGE_KINDS
from pi_dispatch.core.prompt import TargetRefused
from pi_dispatch.core.reasons import Reason
from pi_dispatch.forgeapi.errors import ForgeCallError
from pi_dispatch.infra.events import EventLog

if TYPE_CHECKING:
    from pi_dispatch.forgeapi.jobforge import JobForge

CLOSE_WAIT_S: Final = 15.0
STOPS: Final = frozenset({str(Reason.WORKER_ABORT), str(Reason.OPERATOR_CANCEL)})  # failed, with their own texts


@dataclass
class ForgeComments:
    """One worker's comments back to its jobs' forges."""

    forges: Mapping[str, JobForge]
    log: EventLog
    words: Mapping[str, str] = field(default_factory=dict)  # this host's facts a text may name (its image, provider)
    posting: set[asyncio.Task[None]] = field(default_factory=set)

    def ended(self, job_id: str, data: Mapping[str, Any], result: Mapping[str, Any], words: Mapping[str, Any]) -> None:
        """A returned result: a refusal or a stop with the reference's text gets it; a completion nothing."""
        if result.get("outcome") != "policy":
            return
        reason = result.get("reason")
        text = comment_text(str(reason), {**self.words, **self._job_words(data), **words})
        if text is not None:
            self._post(job_id, data, text)

    def failed(self, job_id: str, data: object, reason: str) -> None:
        """BullMQ's final failure: a stop's own text (`worker-abort`, `operator-cancel`), else the failure text."""
        text = TEXTS[Reason(reason)] if reason in STOPS else FINAL_FAILURE
        if isinstance(data, Mapping):
            self._post(job_id, data, text)

    @staticmethod
    def _job_words(data: Mapping[str, Any]) -> dict[str, str]:
        """What the job itself names that a text repeats: its kind, image and provider (names, never its text)."""
        named = {key: data.get(key) for key in ("kind", "image", "provider")}
        return {key: value for key, value in named.items() if isinstance(value, str) and value}

    def _post(self, job_id: str, data: Mapping[str, Any], text: str) -> None:
        forge = self.forges.get(str(data.get("kind")))
        if data.get("kind") not in FORGE_KINDS or forge is None:
            self.log("comment", {"jobId": job_id, "text": text})  # a local job, or a forge this host cannot reach
            return
        task = asyncio.ensure_future(self._send(forge, job_id, data, text))
        self.posting.add(task)
        task.add_done_callback(self.posting.discard)

    async def _send(self, forge: JobForge, job_id: str, data: Mapping[str, Any], text: str) -> None:
        try:
            await forge.comment(data, await forge.mint(data), text)
        except (ForgeCallError, TargetRefused) as failed:  # TargetRefused: a number the forge's call cannot name
            self.log("comment_failed", {"jobId": job_id, "reason": getattr(failed, "reason", type(failed).__name__)})
        else:
            self.log("commented", {"jobId": job_id})

    async def close(self) -> None:
        """Let what is being posted finish, within a bound."""
        if self.posting:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*self.posting, return_exceptions=True), CLOSE_WAIT_S)
