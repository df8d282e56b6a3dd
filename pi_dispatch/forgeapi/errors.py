"""A forge call that gave no answer, kept apart from the HTTP client so that code which only handles the failure
(the worker's job preparation) does not load the client's library."""

from __future__ import annotations

from pi_dispatch.core.errors import ExitStatus, PiDispatchError


class ForgeCallError(PiDispatchError):
    """A forge call that did not give an answer; `transient` says whether another try may."""

    def __init__(
        self, reason: str, *, transient: bool, status: int | None = None, request_id: str | None = None
    ) -> None:
        self.reason = reason
        self.transient = transient
        self.status = status
        self.request_id = request_id
        self.exit_code = ExitStatus.FAILURE if transient else ExitStatus.CONFIG
        super().__init__(reason)
