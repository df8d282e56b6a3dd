"""Job folders: what a job's container reads at `/job`, written before it starts and removed after it ends.

A folder holds the job's event (its trigger, verbatim) as `event.json` and its fields minus secrets, wait
conditions and hold state as `job.json`. Each worker keeps its folders under a folder of its own,
`<jobs dir>/<worker>/<job>-<random>.job`, so a jobs dir shared by mistake never mixes two workers' folders, and a
worker clears only its own at boot (a name that is a prefix of another's, `a` and `a-b`, included).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from pi_dispatch.core.jscompat import js_json
from pi_dispatch.core.names import record_stem
from pi_dispatch.core.waits import HOLD_KEY

JOB_DIR_SUFFIX: Final = ".job"
# Job data the container never sees: secret bindings, wait conditions and our hold state.
PRIVATE_KEYS: Final = frozenset({"secrets", "secretsProfile", "waitFor", HOLD_KEY})


def worker_jobs_dir(jobs_dir: Path, worker: str) -> Path:
    return jobs_dir / worker


def new_job_dir(jobs_dir: Path, worker: str, job_id: str, mode: int = 0o700) -> Path:
    """A fresh folder for the job under the worker's own folder, with `mode`."""
    own = worker_jobs_dir(jobs_dir, worker)
    own.mkdir(parents=True, exist_ok=True)
    # passed through, never listed: the daemon mounts a folder inside, and the Docker socket proxy follows a bind's
    # links through them to judge it (the modes set as said, whatever the worker's umask made of them)
    for passed in (jobs_dir, own):
        passed.chmod(0o711)
    folder = Path(tempfile.mkdtemp(dir=own, prefix=f"{record_stem(job_id)}-", suffix=JOB_DIR_SUFFIX))
    folder.chmod(mode)
    return folder


def write_job_dir(jobs_dir: Path, worker: str, job_id: str, data: Mapping[str, Any]) -> Path:
    """A fresh folder holding the job's event and its non-secret fields, readable by the job image's user."""
    folder = new_job_dir(jobs_dir, worker, job_id, 0o755)  # the job image may read it as any user; no secret in it
    trigger = data.get("trigger")
    event = js_json(trigger if isinstance(trigger, Mapping) else {})
    fields = js_json({key: value for key, value in data.items() if key not in PRIVATE_KEYS})
    for name, text in (("event.json", event), ("job.json", fields)):
        (folder / name).write_text(text + "\n", encoding="utf-8")
        (folder / name).chmod(0o644)
    return folder


def clear_job_dirs(jobs_dir: Path, worker: str) -> int:
    """Remove the job folders a previous run of this worker left behind: its own folder's, nobody else's."""
    removed = 0
    with contextlib.suppress(OSError):
        for folder in worker_jobs_dir(jobs_dir, worker).iterdir():
            if folder.name.endswith(JOB_DIR_SUFFIX) and folder.is_dir() and not folder.is_symlink():
                shutil.rmtree(folder, ignore_errors=True)
                removed += 1
    return removed
