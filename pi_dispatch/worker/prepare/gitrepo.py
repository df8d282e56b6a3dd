"""Git for a job's workspace, hardened as the reference runs it: a shallow fetch of one commit into a fresh
repository, its token reaching git only through `GIT_ASKPASS` for that one fetch, and `.pi/` read by object id.

Every command runs without a shell, hooks off, fsmonitor off, `protocol.ext` never, no credential helper and no
pager; the operator's own git configuration (a global `url.insteadOf`, a credential store) is not read. The
remote is tokenless, so neither argv, nor `.git/config`, nor the job's folder ever holds the token: a script that
prints it from its own environment is the only way it reaches git, and the script's folder is gone after the fetch.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from pi_dispatch.core.piskills import LISTING_BYTES, Placed, UnreadableListing, parse_listing, plan
from pi_dispatch.core.reasons import Reason

CLONE_FLAGS: Final = (
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "protocol.ext.allow=never",
    "-c",
    "credential.helper=",
    "--no-pager",
)
READ_FLAGS: Final = ("-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "--no-pager")
# What git says when the commit asked for is no longer on the forge (a force-push, a deleted branch)
SHA_GONE_SIGNS: Final = (
    "couldn't find remote ref",
    "not our ref",
    "unadvertised object",
    "did not send all necessary objects",
    "reference is not a tree",
)
ASKPASS: Final = '#!/bin/sh\nprintf %s "$GIT_ASKPASS_TOKEN"\n'
GIT_TIMEOUT_S: Final = 600.0
OUTPUT_CAP: Final = 16 * 1024 * 1024


def read_flags(repository: Path) -> tuple[str, ...]:
    """The read prefix for one repository. An operator's folder owned by another user than the worker is read all
    the same (`safe.directory` for it alone): with hooks and fsmonitor off, reading it runs nothing of it."""
    return (*READ_FLAGS, "-c", f"safe.directory={repository}", "-C", str(repository))


class GitFailed(Exception):
    """A git command that failed; its message is git's own stderr (never a token: none is on its command line)."""

    def __init__(self, code: int | None, stderr: str) -> None:
        super().__init__(stderr[-2000:])
        self.code, self.stderr = code, stderr


def git_environment(extra: Mapping[str, str] | None = None, ca_file: Path | None = None) -> dict[str, str]:
    """The worker's environment without the operator's git configuration, never prompting."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("GIT_")}
    env |= {"GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    if ca_file is not None:  # git's curl reads its own variable, not OpenSSL's SSL_CERT_FILE
        env["GIT_SSL_CAINFO"] = str(ca_file)
    return env | dict(extra or {})


async def git(
    args: tuple[str, ...], *, cwd: Path, env: Mapping[str, str], flags: tuple[str, ...] = CLONE_FLAGS
) -> bytes:
    """Run one git command; its stdout, or GitFailed."""
    process = await asyncio.create_subprocess_exec(
        "git",
        *flags,
        *args,
        cwd=cwd,
        env=dict(env),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        limit=OUTPUT_CAP,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), GIT_TIMEOUT_S)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise GitFailed(None, "git did not finish in time") from None
    if process.returncode != 0:
        raise GitFailed(process.returncode, err.decode("utf-8", "replace"))
    return out


@dataclass(frozen=True)
class Fetched:
    """A workspace at one commit, or why the commit could not be had (`sha-gone`)."""

    sha: str
    gone: bool = False


async def fetch_commit(workspace: Path, url: str, sha: str, token: str, ca_file: Path | None = None) -> Fetched:
    """`git init`, a tokenless origin, a depth-1 fetch of sha (its token through GIT_ASKPASS), a detached checkout.
    A commit the forge no longer has is `gone`; any other failure raises GitFailed (retried)."""
    env = git_environment(ca_file=ca_file)
    askpass_dir = Path(tempfile.mkdtemp(prefix="pi-askpass-"))
    try:
        askpass = askpass_dir / "askpass.sh"
        askpass.write_text(ASKPASS)
        askpass.chmod(0o700)
        await git(("init", "--quiet"), cwd=workspace, env=env)
        await git(("remote", "add", "origin", url), cwd=workspace, env=env)
        fetch_env = env | {"GIT_ASKPASS": str(askpass), "GIT_ASKPASS_TOKEN": token}
        fetch = ("fetch", "--quiet", "--depth=1", "--no-tags", "--no-recurse-submodules", "origin", sha)
        try:
            await git(fetch, cwd=workspace, env=fetch_env)
            await git(("checkout", "--quiet", "--detach", "FETCH_HEAD"), cwd=workspace, env=env)
        except GitFailed as failed:
            if any(sign in f"{failed.stderr}".lower() for sign in SHA_GONE_SIGNS):
                return Fetched(sha, gone=True)
            raise
    finally:
        shutil.rmtree(askpass_dir, ignore_errors=True)
    return Fetched(sha)


async def materialise_pi(repository: Path, sha: str, job_dir: Path) -> Reason | int:
    """`.pi/`'s persona and skills at sha, written 0444 under job_dir/pi; a cap's reason (nothing written) else.
    Returns how many files were written."""
    env = git_environment()
    read = read_flags(repository)
    listing = await git(("ls-tree", "-r", "-l", "-z", sha, ".pi/"), cwd=repository, env=env, flags=read)
    if len(listing) > LISTING_BYTES:
        return Reason.PI_TOO_MANY_FILES
    try:
        placed = plan(parse_listing(listing))
    except UnreadableListing as unreadable:
        raise GitFailed(None, str(unreadable)) from None
    if isinstance(placed, Reason):
        return placed
    for item in placed:
        await _write_blob(repository, item, job_dir, env, read)
    return len(placed)


async def _write_blob(
    repository: Path, item: Placed, job_dir: Path, env: Mapping[str, str], read: tuple[str, ...]
) -> None:
    blob = await git(("cat-file", "blob", item.oid), cwd=repository, env=env, flags=read)
    target = job_dir / item.out
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(blob)
    target.chmod(0o444)


async def head_commit(folder: Path) -> str | Reason:
    """A local folder's HEAD commit; `local-folder-no-commit` for a repository with none yet, or
    `local-folder-unreadable-repo` for one git cannot read."""
    env = git_environment()
    read = read_flags(folder)
    try:
        out = await git(("rev-parse", "--verify", "--quiet", "HEAD^{commit}"), cwd=folder, env=env, flags=read)
        return out.decode().strip()
    except GitFailed as failed:
        if failed.code == 1:
            try:
                await git(("symbolic-ref", "-q", "HEAD"), cwd=folder, env=env, flags=read)
                return Reason.LOCAL_FOLDER_NO_COMMIT
            except GitFailed:
                return Reason.LOCAL_FOLDER_UNREADABLE_REPO
        if failed.code == 128:
            return Reason.LOCAL_FOLDER_UNREADABLE_REPO
        raise
