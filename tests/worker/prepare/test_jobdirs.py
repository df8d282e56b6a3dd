"""Job folders: the event and the job's fields without secrets, and each worker clearing only its own."""

from __future__ import annotations

import json
from pathlib import Path

from pi_dispatch.testing.jobs import forge_job
from pi_dispatch.worker.prepare.jobdirs import clear_job_dirs, write_job_dir


def test_job_dirs_hold_the_event_and_no_secret_and_are_cleared_per_worker(tmp_path: Path) -> None:
    job = forge_job(5, secretsProfile="prod", secrets={"TOKEN": "vault/ref"}, waitFor=[{"profile": "ci"}])
    mine = write_job_dir(tmp_path, "mini1", "gh-5", job)
    theirs = write_job_dir(tmp_path, "mini2", "gh-5", job)
    assert json.loads((mine / "event.json").read_text()) == job["trigger"]
    fields = json.loads((mine / "job.json").read_text())
    assert fields["repo"] == "acme/app" and not {"secrets", "secretsProfile", "waitFor"} & set(fields)
    assert "vault/ref" not in (mine / "job.json").read_text()
    assert clear_job_dirs(tmp_path, "mini1") == 1
    assert not mine.exists() and theirs.exists()
