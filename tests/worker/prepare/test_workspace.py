"""A job under the reference's contract, end to end against real services: a stand-in GitHub over HTTPS with a test
CA (its App token endpoint, API and git's smart HTTP), a real store, BullMQ, Docker, and a probe image that says
from inside what it was given."""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from bullmq import Queue

from pi_dispatch.testing.forge import StandInForge
from pi_dispatch.testing.jobs import forge_job
from pi_dispatch.testing.probeimage import probed
from tests.support.workers import finished_job, record_of, running_worker, settings_of, worker_env

PROVIDER_KEY = "sk-ant-test-key-0123456789"
FILES = {"README.md": "the app\n", ".pi/APPEND_SYSTEM.md": "persona\n", ".pi/skills/fix/SKILL.md": "fix it\n"}


@pytest.fixture
async def forge(tmp_path: Path) -> AsyncIterator[StandInForge]:
    standin = StandInForge(tmp_path / "forge")
    await standin.start()
    yield standin
    await standin.stop()


def reference_env(tmp_path: Path, url: str, image: str, forge: StandInForge, **extra: str) -> dict[str, str]:
    return worker_env(
        tmp_path,
        url,
        image,
        "mini1",
        PI_JOB_CONTRACT="reference",
        GITHUB_AUTH_SOURCE="app",
        GITHUB_APP_ID=forge.app_id,
        GITHUB_APP_INSTALLATION_ID=forge.installation_id,
        GITHUB_APP_PRIVATE_KEY_PATH=str(forge.key_file),
        GITHUB_API_URL=forge.api_url,
        SSL_CERT_FILE=str(forge.ca_file),
        ANTHROPIC_API_KEY=PROVIDER_KEY,
        PI_MODEL="claude-test",
        **extra,
    )


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def github_job(number: int) -> dict[str, Any]:
    return forge_job(number, trigger={"event": "issues", "action": "labeled"})


@pytest.mark.docker
@pytest.mark.redis
@pytest.mark.slow
async def test_a_github_job_gets_the_reference_contract(
    tmp_path: Path, valkey_url: str, probe_image: str, forge: StandInForge, queues: dict[str, Queue]
) -> None:
    sha = forge.add_repository("acme/app", FILES)
    forge.add_repository("acme/other", {"README.md": "another\n"})
    settings = settings_of(reference_env(tmp_path, valkey_url, probe_image, forge))
    async with running_worker(settings) as w:
        await queues["pi-jobs@mini1"].add("github", github_job(7), {"jobId": "gh-7"})
        job = await finished_job(queues["pi-jobs@mini1"], "gh-7")
        output = (w.logs_dir / "gh-7.log").read_text()
    assert job.returnvalue["outcome"] == "completed", output
    seen = probed(output)
    assert seen["head"] == sha and seen["readme"] == "the app"  # the default branch's commit, cloned
    tokens = [token for token, reach in forge.minted.items() if reach == "acme/app"]
    assert len(tokens) == 1 and forge.mints == [{"repositories": ["app"]}]  # one repository, no permissions asked
    assert seen["github_token"] == seen["gh_token"] == digest(tokens[0])  # under both of GitHub's names
    assert seen["provider_key"] == digest(PROVIDER_KEY)
    assert seen["provider"] == "anthropic/m/5" and seen["job_id"] == "pi-job-gh-7"
    assert seen["token_in_files"] == "no"  # never in .git/config, never in /job
    files = seen["job_files"].split(",")
    assert {"./prompt.md", "./event.json", "./pi/APPEND_SYSTEM.md", "./pi/skills/fix/SKILL.md"} <= set(files)
    assert seen["prompt_first"].startswith("You are an automated pi-dispatch job triggered by a GitHub issue")
    assert seen["event_issue"] == '"number": 7'
    assert seen["user"] == "1001:1001" and seen["workspace_writable"] == "yes" and seen["job_writable"] == "no"
    assert seen["outbox"] == "no"
    names = set(seen["env"].strip(",").split(","))
    assert {"PI_PROVIDER", "PI_MODEL", "PI_MAX_TURNS", "PI_JOB_ID", "PI_OFFLINE", "GITHUB_TOKEN", "GH_TOKEN"} <= names
    assert not names & {"GITHUB_APP_PRIVATE_KEY", "GITHUB_APP_PRIVATE_KEY_PATH", "VALKEY_URL", "OPENAI_API_KEY"}
    fetches = [call for call in forge.calls if ".git/" in call[1]]
    assert fetches and {token for _, _, token in fetches if token} == {tokens[0]}  # git saw the job's token only
    kept = (w.logs_dir / "gh-7.json").read_text() + output
    assert tokens[0] not in kept and PROVIDER_KEY not in kept  # never in the record or the kept output
    assert forge.comments == []  # a completed run: the agent posts its own status


@pytest.mark.docker
@pytest.mark.redis
@pytest.mark.slow
async def test_refusals_before_any_clone_or_money(
    tmp_path: Path,
    valkey_url: str,
    client: aioredis.Redis,
    probe_image: str,
    forge: StandInForge,
    queues: dict[str, Queue],
) -> None:
    forge.add_repository("acme/app", FILES, protected=False)
    forge.add_repository("acme/gone", FILES)
    forge.stale["acme/gone"] = "d" * 40  # the branch names a commit the forge no longer has
    settings = settings_of(reference_env(tmp_path, valkey_url, probe_image, forge, PI_DAILY_CAP="5"))
    queue = queues["pi-jobs@mini1"]
    async with running_worker(settings) as w:
        await queue.add("github", github_job(1), {"jobId": "gh-1"})
        await queue.add("github", {**github_job(2), "repo": "acme/gone"}, {"jobId": "gh-2"})
        await queue.add("github", {**github_job(3), "replica": 1, "replicas": 2}, {"jobId": "gh-3"})
        await queue.add("github", {**github_job(4), "provider": "openai"}, {"jobId": "gh-4"})
        ended = {job_id: (await finished_job(queue, job_id)).returnvalue for job_id in ("gh-1", "gh-2", "gh-3", "gh-4")}
    assert {job_id: result["reason"] for job_id, result in ended.items()} == {
        "gh-1": "unprotected-branch",
        "gh-2": "sha-gone",
        "gh-3": "job-image-replicas-unsupported",
        "gh-4": "provider-unconfigured",
    }
    assert all(result["outcome"] == "policy" for result in ended.values())
    assert not [call for call in forge.calls if "/acme/app.git/" in call[1]]  # unprotected: never cloned
    assert [path for _, path, _ in forge.calls if path.endswith("/protection")] == [
        "/api/v3/repos/acme/app/branches/main/protection",
        "/api/v3/repos/acme/gone/branches/main/protection",
    ]  # the image and provider gates refused before any token or forge call
    assert {number: text for _, number, text in forge.comments} == {  # one each; sha-gone, a preparation's, none
        1: "Refused: the default branch is not protected. See SECURITY.md.",
        3: 'Refused: the job image "pi-dispatch-probe-job:latest" does not declare replica support '
        "(`dev.pi-dispatch.capabilities` declares: anyUid), so its baked guardrails would name the wrong branch. "
        "Rebuild the image from a version that has this feature. Not run.",
        4: 'Refused: this deployment has no usable credential for the "openai" provider, so no container was '
        "started and nothing was spent. Ask the operator to run `pi-dispatch doctor`. Not run.",
    }
    assert len(forge.comments) == 3
    assert not list(w.logs_dir.glob("*.log"))  # no container ran
    assert not await client.keys("*budget*")  # nothing counted in the job windows
    assert record_of(w.logs_dir, "gh-2")["reason"] == "sha-gone"


OTHER_FORGES = {  # a job of each as its receiver enqueues it, and where its token goes in the job
    "gitlab": ({"projectId": 1}, ("GITLAB_TOKEN", "GL_TOKEN"), "GITLAB_HOST", "GitLab issue"),
    "forgejo": ({}, ("FORGEJO_TOKEN", "GITEA_SERVER_TOKEN"), "FORGEJO_HOST", "Forgejo issue"),
    "azure": (
        {"azure": {"project": "acme", "repository": "app"}},
        ("AZURE_DEVOPS_EXT_PAT", "SYSTEM_ACCESSTOKEN"),
        "AZURE_DEVOPS_ORG_URL",
        "Azure DevOps work item",
    ),
}


@pytest.mark.docker
@pytest.mark.redis
@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(OTHER_FORGES))
async def test_a_job_of_each_other_forge_gets_its_own_names(
    kind: str, tmp_path: Path, valkey_url: str, probe_image: str, forge: StandInForge, queues: dict[str, Queue]
) -> None:
    sha = forge.add_repository("acme/app", FILES)
    root = f"https://127.0.0.1:{forge.port}"
    instance = {"gitlab": root, "forgejo": root, "azure": f"{root}/org"}[kind]
    url_variable = {"gitlab": "GITLAB_URL", "forgejo": "FORGEJO_URL", "azure": "AZURE_ORG_URL"}[kind]
    token_variable = {"gitlab": "GITLAB_TOKEN", "forgejo": "FORGEJO_TOKEN", "azure": "AZURE_TOKEN"}[kind]
    extra = {url_variable: instance, token_variable: forge.pat}
    settings = settings_of(reference_env(tmp_path, valkey_url, probe_image, forge, **extra))
    scope, names, host_variable, opening = OTHER_FORGES[kind]
    async with running_worker(settings) as w:
        await queues["pi-jobs@mini1"].add(kind, {**github_job(9), "kind": kind, **scope}, {"jobId": f"{kind}-9"})
        job = await finished_job(queues["pi-jobs@mini1"], f"{kind}-9")
        output = (w.logs_dir / f"{kind}-9.log").read_text()
    assert job.returnvalue["outcome"] == "completed", output
    seen = probed(output)
    assert seen["head"] == sha and seen["readme"] == "the app"
    assert seen["tokens"] == "".join(f"{name}:{digest(forge.pat)}," for name in names)  # its forge's names only
    assert seen["forge_host"] == instance and host_variable in seen["env"]
    assert opening in seen["prompt_first"]


def git(*args: str, cwd: Path) -> str:
    identity = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@x",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@x",
    }
    done = subprocess.run(
        ["git", *args], cwd=cwd, env={"PATH": "/usr/bin:/bin", **identity}, check=True, capture_output=True, text=True
    )
    return done.stdout.strip()


@pytest.mark.docker
@pytest.mark.redis
@pytest.mark.slow
async def test_a_local_job_edits_its_folder_in_place(
    tmp_path: Path, valkey_url: str, probe_image: str, forge: StandInForge, queues: dict[str, Queue]
) -> None:
    folder = tmp_path / "app"
    folder.mkdir()
    (folder / "README.md").write_text("local app\n")
    git("init", "--quiet", cwd=folder)
    git("add", "-A", cwd=folder)
    git("commit", "--quiet", "-m", "one", cwd=folder)
    sha = git("rev-parse", "HEAD", cwd=folder)
    for path in [folder, *folder.rglob("*")]:  # an operator's folder: a root worker runs its job as its owner
        os.lchown(path, 1234, 1234)
    (tmp_path / "plain").mkdir()
    settings = settings_of(reference_env(tmp_path, valkey_url, probe_image, forge))
    queue = queues["pi-jobs@mini1"]
    async with running_worker(settings) as w:
        await queue.add("local", {"kind": "local", "folder": str(folder), "task": "tidy"}, {"jobId": "local-1"})
        await queue.add(
            "local", {"kind": "local", "folder": str(tmp_path / "plain"), "task": "x"}, {"jobId": "local-2"}
        )
        job = await finished_job(queue, "local-1")
        refused = await finished_job(queue, "local-2")
        output = (w.logs_dir / "local-1.log").read_text()
    assert job.returnvalue["outcome"] == "completed", output
    assert refused.returnvalue["reason"] == "local-folder-not-a-repo"
    seen = probed(output)
    assert seen["head"] == "ref: refs/heads/master" and seen["event_sha"] == sha  # its own HEAD, not a clone
    assert seen["readme"] == "local app" and seen["outbox"] == "yes"
    assert seen["github_token"] == digest("")  # a local job without run.github gets no token
    assert (folder / ".probe-wrote").exists() and seen["user"] == "1234:1234"  # edited in place, by its owner
    assert str(folder) not in output
