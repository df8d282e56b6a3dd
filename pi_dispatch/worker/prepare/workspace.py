"""A job prepared as the reference prepares it, after its free gates and its secrets, before any money: its forge
token minted, the default branch's protection checked with it, the clone, `.pi/`, the prompt and `event.json`.

Forge jobs: a token for the job (an App's scoped to its one repository), then the default branch (a protected one
only: `unprotected-branch`) and its commit from the forge's API, never from the delivery; then a fresh repository
fetching that one commit into `<job>/workspace`. Local jobs: the folder itself is the workspace, edited in place;
its HEAD is the commit, and only it gets `/outbox`. Either way `.pi/` is read from the commit, and `prompt.md` and
`event.json` are written read-only. A refusal here (`sha-gone`, a `.pi/` cap, a local folder that is no repository)
removes the folder and counts nothing; a forge or git that did not answer is retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from pi_dispatch.core.jobenv import token_kind
from pi_dispatch.core.jobevent import event_text, forge_event, local_event
from pi_dispatch.core.jobs import LOCAL_KIND
from pi_dispatch.core.jobuser import JobUser
from pi_dispatch.core.prompt import PromptInput, TargetRefused, command_prompt, local_prompt
from pi_dispatch.core.reasons import Reason
from pi_dispatch.forgeapi.errors import ForgeCallError
from pi_dispatch.infra.events import EventLog
from pi_dispatch.worker.gates.scripts import InfraRetry, Refusal
from pi_dispatch.worker.prepare.gitrepo import GitFailed, fetch_commit, head_commit, materialise_pi
from pi_dispatch.worker.prepare.jobdirs import new_job_dir

if TYPE_CHECKING:
    from pi_dispatch.forgeapi.jobforge import JobForge

READ_ONLY: Final = 0o444


class ConfigRefused(Exception):
    """This deployment cannot prepare the job (no credentials for its forge, an App with no repository, a local
    folder that does not exist): refused `config-refused`, its cause logged, never retried."""


@dataclass
class Prepared:
    """A job's folders, and the token its container gets."""

    job_dir: Path  # /job, read-only
    workspace: Path | None = None  # /workspace
    outbox: Path | None = None  # /outbox, local jobs only
    token: str | None = field(default=None, repr=False)
    token_kind: str | None = None
    instance_url: str | None = None
    sha: str | None = None
    user: str | None = None  # a root worker's local job runs as its folder's owner (`uid:gid`)

    def remove(self) -> None:
        shutil.rmtree(self.job_dir, ignore_errors=True)


def _write(folder: Path, name: str, text: str) -> None:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    path.chmod(READ_ONLY)


def _hand_over(folders: list[Path], owner: tuple[int, int] | None) -> None:
    """A root worker's job runs as the image's user: its folders are that user's (never a local job's own)."""
    if owner is None:
        return
    for top in folders:
        for path in [top, *top.rglob("*")]:
            with contextlib.suppress(FileNotFoundError):
                os.lchown(path, *owner)


@dataclass
class Preparer:
    """Prepares each job of one worker under the reference's contract."""

    jobs_dir: Path
    worker: str
    forges: Mapping[str, JobForge]
    log: EventLog
    ca_file: Path | None = None

    async def close(self) -> None:
        for forge in self.forges.values():
            await forge.close()

    async def prepare(self, job_id: str, data: Mapping[str, Any], user: JobUser) -> Prepared | Refusal:
        """The job's folders and token, or its refusal. Raises InfraRetry when a forge or git did not answer."""
        try:
            token, kind = await self._token(data)
            if data.get("kind") == LOCAL_KIND:
                return await self._local(job_id, data, user, token, kind)
            return await self._forge_job(job_id, data, user, token or "", kind or "")
        except ConfigRefused as refused:
            self.log("job_config_refused", {"jobId": job_id, "cause": str(refused)})
            return Refusal(Reason.CONFIG_REFUSED)
        except ForgeCallError as failed:
            if failed.transient:
                self.log("forge_unanswered", {"jobId": job_id, "cause": failed.reason})
                raise InfraRetry(Reason.INFRA) from None
            self.log("job_config_refused", {"jobId": job_id, "cause": failed.reason})
            return Refusal(Reason.CONFIG_REFUSED)

    def _forge_of(self, kind: str | None) -> JobForge:
        forge = self.forges.get(kind or "")
        if forge is None:
            raise ConfigRefused(f"no forge credentials are configured for job kind {kind!r}")
        return forge

    async def _token(self, data: Mapping[str, Any]) -> tuple[str | None, str | None]:
        kind = token_kind(data.get("kind"), data.get("github"))
        if kind is None:
            if data.get("kind") != LOCAL_KIND:
                raise ConfigRefused("unknown job kind")
            return None, None
        token = await self._forge_of(kind).mint(data)
        if not token.strip():
            raise ConfigRefused(f"the {kind} token is empty")
        return token, kind

    async def _forge_job(
        self, job_id: str, data: Mapping[str, Any], user: JobUser, token: str, kind: str
    ) -> Prepared | Refusal:
        forge = self._forge_of(kind)
        branch = await forge.default_branch(data, token)
        if not await forge.protected(data, token, branch):
            self.log("refused_unprotected", {"jobId": job_id, "repo": str(data.get("repo"))})
            return Refusal(Reason.UNPROTECTED_BRANCH)
        sha = await forge.branch_sha(data, token, branch)
        prompt = self._prompt(data, forge)
        job_dir = await asyncio.to_thread(new_job_dir, self.jobs_dir, self.worker, job_id)
        prepared = Prepared(job_dir, job_dir / "workspace", None, token, kind, forge.instance_url(), sha)
        try:
            prepared.workspace.mkdir()  # type: ignore[union-attr]
            fetched = await fetch_commit(job_dir / "workspace", forge.clone_url(data), sha, token, self.ca_file)
            if fetched.gone:
                return self._refused(prepared, Reason.SHA_GONE)
            if isinstance(written := await materialise_pi(job_dir / "workspace", sha, job_dir), Reason):
                return self._refused(prepared, written)
            await asyncio.to_thread(self._write_job_files, job_dir, prompt, event_text(forge_event(data)))
            await asyncio.to_thread(_hand_over, [job_dir], user.owner)
        except GitFailed:
            prepared.remove()
            self.log("fetch_failed", {"jobId": job_id, "repo": str(data.get("repo"))})
            raise InfraRetry(Reason.INFRA) from None
        except BaseException:
            prepared.remove()
            raise
        return prepared

    def _prompt(self, data: Mapping[str, Any], forge: JobForge) -> str:
        command = data.get("command")
        if isinstance(command, str) and command:
            return command_prompt(command)
        try:
            return forge.prompt(PromptInput.of(data))
        except TargetRefused as refused:
            raise ConfigRefused(str(refused)) from None

    @staticmethod
    def _write_job_files(job_dir: Path, prompt: str, event: str) -> None:
        _write(job_dir, "prompt.md", prompt)
        _write(job_dir, "event.json", event)

    def _refused(self, prepared: Prepared, reason: Reason) -> Refusal:
        prepared.remove()
        return Refusal(reason)

    async def _local(
        self, job_id: str, data: Mapping[str, Any], user: JobUser, token: str | None, kind: str | None
    ) -> Prepared | Refusal:
        folder = self._local_folder(data)
        if not (folder / ".git").exists():
            return Refusal(Reason.LOCAL_FOLDER_NOT_A_REPO)
        try:
            sha = await head_commit(folder)
        except GitFailed:
            raise InfraRetry(Reason.INFRA) from None
        if isinstance(sha, Reason):
            return Refusal(sha)
        owner = user.owner
        if owner is not None:  # a root worker: the job runs as whoever owns the folder, never as root
            facts = folder.stat()
            if facts.st_uid == 0:
                return Refusal(Reason.JOB_USER_UNMAPPABLE)
            owner = (facts.st_uid, facts.st_gid)
        job_dir = await asyncio.to_thread(new_job_dir, self.jobs_dir, self.worker, job_id)
        prepared = Prepared(job_dir, folder, job_dir / "outbox", token, kind, None, sha)
        prepared.user = f"{owner[0]}:{owner[1]}" if owner is not None else None
        try:
            (job_dir / "outbox").mkdir()
            if isinstance(written := await materialise_pi(folder, sha, job_dir), Reason):
                return self._refused(prepared, written)
            command, flow = data.get("command"), data.get("flow")
            task = data.get("task") if isinstance(data.get("task"), str) else ""
            prompt = (
                command_prompt(command)
                if isinstance(command, str) and command
                else local_prompt(str(task), flow if isinstance(flow, str) else None)
            )
            event = event_text(local_event(data, folder.name, sha))
            await asyncio.to_thread(self._write_job_files, job_dir, prompt, event)
            await asyncio.to_thread(_hand_over, [job_dir], owner)
        except GitFailed:
            prepared.remove()
            raise InfraRetry(Reason.INFRA) from None
        except BaseException:
            prepared.remove()
            raise
        return prepared

    @staticmethod
    def _local_folder(data: Mapping[str, Any]) -> Path:
        """The local job's folder, resolved (what is mounted is where it really is)."""
        named = data.get("folder")
        if not isinstance(named, str) or not named.startswith("/"):
            raise ConfigRefused("a local job names no absolute folder")
        try:
            folder = Path(named).resolve(strict=True)
        except (FileNotFoundError, NotADirectoryError, RuntimeError) as missing:
            raise ConfigRefused(f"local folder does not exist: {Path(named).name}") from missing
        except OSError:
            raise InfraRetry(Reason.INFRA) from None
        if not folder.is_dir():
            raise ConfigRefused(f"local folder does not exist: {Path(named).name}")
        return folder
