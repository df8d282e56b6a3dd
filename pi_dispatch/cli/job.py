"""`pi-dispatch job JOB_ID` (where a job is now, and every attempt) and `pi-dispatch logs JOB_ID` (its output)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Annotated, Any, Final

import typer

from pi_dispatch.cli.common import JsonOption, ValkeyUrlOption, console, errors, print_json
from pi_dispatch.cli.reads import run_store
from pi_dispatch.core.errors import ExitStatus
from pi_dispatch.core.names import record_stem
from pi_dispatch.fleet.jobhistory import Entry, log_attempts, read_attempts, read_entries, wait_entries

FOLLOW_START_S: Final = 60.0  # how long `logs -f` waits for a job's first output to appear
QUIET_CHECK_S: Final = 15  # after this many quiet seconds a follower asks whether the attempt ended without a word
JobArgument = Annotated[str, typer.Argument(help="The job's id, as `runs` and the logs show it.")]
LogsDirOption = Annotated[
    Path | None, typer.Option("--logs-dir", help="This host's PI_LOGS_DIR, for the attempts it ran itself.")
]


def logs_dir_of(option: Path | None) -> Path:
    from pi_dispatch.config.sources import HostFacts

    return option or Path(os.environ.get("PI_LOGS_DIR") or HostFacts.of_this_machine().default_logs_dir())


def job(
    job_id: JobArgument, url: ValkeyUrlOption = None, logs_dir: LogsDirOption = None, as_json: JsonOption = False
) -> None:
    """Where a job is now (queue, state, hold, host, attempts left, next retry), its route, and every attempt."""
    from pi_dispatch.console.jobfacts import read_job_facts
    from pi_dispatch.console.jobview import print_job

    facts = run_store(url, lambda client: read_job_facts(client, job_id, logs_dir_of(logs_dir)))
    if as_json:
        print_json(facts)
    else:
        print_job(console, facts)
    if not facts["found"]:
        raise typer.Exit(ExitStatus.FAILURE)


def logs(
    job_id: JobArgument,
    attempt: Annotated[
        int | None, typer.Option("--attempt", min=1, help="Which attempt (default: the latest).")
    ] = None,
    follow: Annotated[bool, typer.Option("-f", "--follow", help="Keep printing while the attempt runs.")] = False,
    tail: Annotated[int | None, typer.Option("--tail", min=1, help="Only the last N lines.")] = None,
    url: ValkeyUrlOption = None,
    logs_dir: LogsDirOption = None,
) -> None:
    """A job's output, secrets masked: from the store on any machine, or this host's own file."""
    code = run_store(url, lambda client: _print_logs(client, job_id, attempt, follow, tail, logs_dir_of(logs_dir)))
    raise typer.Exit(code)


async def _print_logs(
    client: Any, job_id: str, attempt: int | None, follow: bool, tail: int | None, logs_dir: Path
) -> int:
    from pi_dispatch.console.jobview import print_output
    from pi_dispatch.worker.run.output import read_attempt_output

    stem = record_stem(job_id)
    if attempt is None:
        attempt = await _latest_attempt(client, stem, wait_s=FOLLOW_START_S if follow else 0)
    entries = await read_entries(client, stem, attempt, count=1_000) if attempt is not None else []
    if not entries:
        text = read_attempt_output(logs_dir / f"{stem}.log", attempt)
        if text is None:
            errors.print(
                f"no output of job {job_id!r} in the store{'' if attempt is None else f' for attempt {attempt}'}: a "
                "Node worker's jobs have none, and a host with PI_CAPTURE_JOB_LOGS=0 keeps none"
            )
            return ExitStatus.FAILURE
        print_output(text, tail)
        return ExitStatus.OK
    assert attempt is not None
    start = entries[0]
    if start.kind == "start" and start.fields.get("store") == "off":
        text = read_attempt_output(logs_dir / f"{stem}.log", attempt)
        if text is not None:
            print_output(text, tail)
            return ExitStatus.OK
        host = start.fields.get("host", "?")
        errors.print(
            f"attempt {attempt} of {job_id!r} ran on {host}, which keeps its output on its own disk "
            f"(PI_JOB_LOG_STORE=0): run `pi-dispatch logs {job_id} --attempt {attempt}` there"
        )
        return ExitStatus.FAILURE
    return await _stream(client, stem, attempt, entries, follow, tail)


async def _latest_attempt(client: Any, stem: str, wait_s: float) -> int | None:
    """The newest attempt with output in the store; a follower waits a while for a job that has not started yet."""
    deadline = asyncio.get_running_loop().time() + wait_s
    while True:
        made = len(await read_attempts(client, stem))
        if streams := await log_attempts(client, stem, made + 1):
            return streams[-1]
        if asyncio.get_running_loop().time() >= deadline:
            return None
        await asyncio.sleep(0.25)


async def _stream(client: Any, stem: str, attempt: int, entries: list[Entry], follow: bool, tail: int | None) -> int:
    from pi_dispatch.console.jobview import print_end, print_output

    while len(entries) % 1_000 == 0 and entries and entries[-1].kind != "end":  # page through what is there
        more = await read_entries(client, stem, attempt, entries[-1].id, count=1_000)
        if not more:
            break
        entries += more
    print_output(b"".join(entry.text for entry in entries), tail)
    last, quiet = entries[-1], 0
    while follow and last.kind != "end":
        arrived = await wait_entries(client, stem, attempt, last.id)
        for entry in arrived:
            print_output(entry.text, None)
            last = entry
        quiet = 0 if arrived else quiet + 1
        if quiet >= QUIET_CHECK_S and len(await read_attempts(client, stem)) >= attempt:
            errors.print(f"(attempt {attempt} has its record, but its output no end: its worker stopped first)")
            return ExitStatus.OK
        quiet = quiet if quiet < QUIET_CHECK_S else 0
    if last.kind == "end":
        print_end(attempt, last)
    return ExitStatus.OK
