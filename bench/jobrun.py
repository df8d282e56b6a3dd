"""A forge job's way to its container under the reference's contract, with a cold clone every time: from the job's
add to its container's first output line (a scoped App token minted, the protection checked, the default branch
fetched at depth 1 into a fresh folder, `.pi/`, the prompt, the container started), against what it cannot do
without, measured in the same run: a `git clone --depth 1` of the same repository from the same stand-in forge,
plus a plain `docker run --rm` of the same image.

Everything is local: a stand-in GitHub over HTTPS (its App token endpoint, API and `git http-backend`), a store,
Docker, the probe image. The ratio is the worker's time over clone + run; what is left is the API calls (mint,
default branch, protection, commit), the folder and the scheduling.

Usage: python bench/jobrun.py [--jobs N] [--files F]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import docker
from bullmq import Queue

from pi_dispatch.config.sources import HostFacts
from pi_dispatch.config.worker_settings import load_settings
from pi_dispatch.demo.store import EmbeddedValkey
from pi_dispatch.infra.events import discard
from pi_dispatch.testing.forge import StandInForge
from pi_dispatch.testing.jobs import forge_job
from pi_dispatch.testing.probeimage import build_probe_image
from pi_dispatch.testing.services import UNCAPPED
from pi_dispatch.worker.lifecycle import Worker
from pi_dispatch.worker.prepare.gitrepo import ASKPASS
from pi_dispatch.worker.run.containers import ContainerRuntime


def repository_files(count: int) -> dict[str, str]:
    files = {f"src/module_{index:04d}.py": f"# module {index}\n" + "x = 1\n" * 600 for index in range(count)}
    return files | {"README.md": "bench\n", ".pi/skills/fix/SKILL.md": "fix\n"}


def plain_clone(forge: StandInForge, folder: Path) -> float:
    """`git clone --depth 1` of the same repository, its token through an askpass script as the worker's."""
    askpass = folder / "askpass.sh"
    askpass.write_text(ASKPASS)
    askpass.chmod(0o700)
    target = folder / f"clone-{time.monotonic_ns()}"
    env = {
        "PATH": os.environ["PATH"],
        "GIT_ASKPASS": str(askpass),
        "GIT_ASKPASS_TOKEN": forge.pat,
        "GIT_SSL_CAINFO": str(forge.ca_file),
        "GIT_TERMINAL_PROMPT": "0",
    }
    started = time.perf_counter()
    url = f"https://127.0.0.1:{forge.port}/acme/app.git"
    subprocess.run(["git", "clone", "--quiet", "--depth", "1", url, str(target)], env=env, check=True)
    return time.perf_counter() - started


def plain_run(image: str) -> float:
    started = time.perf_counter()
    subprocess.run(["docker", "run", "--rm", image], check=True, capture_output=True)
    return time.perf_counter() - started


def first_line_at(log: Path) -> float:
    """When the worker read the container's first line (the stamp it keeps on each line)."""
    for line in log.read_text().splitlines():
        if " probe: " in line:
            return datetime.datetime.fromisoformat(line.split(" ", 1)[0].replace("Z", "+00:00")).timestamp()
    raise ValueError("no probe line")


async def worker_starts(url: str, image: str, forge: StandInForge, count: int, folder: Path) -> list[float]:
    env = {
        "VALKEY_URL": url,
        "PI_WORKER_NAME": "bench",
        "PI_LOGS_DIR": str(folder / "logs"),
        "PI_JOBS_DIR": str(folder / "jobs"),
        "PI_JOB_IMAGE": image,
        "PI_CONCURRENCY": "1",
        "PI_EGRESS": "0",
        "PI_DAILY_CAP": UNCAPPED,
        "GITHUB_AUTH_SOURCE": "app",
        "GITHUB_APP_ID": forge.app_id,
        "GITHUB_APP_INSTALLATION_ID": forge.installation_id,
        "GITHUB_APP_PRIVATE_KEY_PATH": str(forge.key_file),
        "GITHUB_API_URL": forge.api_url,
        "SSL_CERT_FILE": str(forge.ca_file),
        "ANTHROPIC_API_KEY": "sk-bench",
    }
    settings = load_settings(environment=lambda: env, facts=HostFacts("bench", None, os.geteuid()))
    worker = Worker(settings, ContainerRuntime.connect("bench", 1), discard)
    stop = asyncio.Event()
    task = asyncio.ensure_future(worker.run(stop))
    queue = Queue("pi-jobs@bench", {"connection": url})
    await asyncio.sleep(3)  # boot is not per-job cost
    starts = []
    for index in range(count):
        record = folder / "logs" / f"gh-j{index}.json"
        added = time.time()
        await queue.add("github", forge_job(index + 1, trigger={"event": "issues"}), {"jobId": f"gh-j{index}"})
        while not record.exists():
            await asyncio.sleep(0.005)
        if not (folder / "logs" / f"gh-j{index}.log").exists():
            raise SystemExit(f"the job did not run: {record.read_text()}")
        starts.append(first_line_at(folder / "logs" / f"gh-j{index}.log") - added)
    await queue.close()
    stop.set()
    await task
    return starts


def spread(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:6.0f} ms (range {min(values) * 1000:.0f}-{max(values) * 1000:.0f})"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=10)
    parser.add_argument("--files", type=int, default=300, help="files in the repository (about 3.6 KiB each)")
    arguments = parser.parse_args()
    image = build_probe_image(docker.from_env())
    with EmbeddedValkey() as valkey, tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        forge = StandInForge(folder / "forge")
        forge.add_repository("acme/app", repository_files(arguments.files))
        await forge.start()
        try:
            clones = [await asyncio.to_thread(plain_clone, forge, folder) for _ in range(arguments.jobs)]
            runs = [await asyncio.to_thread(plain_run, image) for _ in range(arguments.jobs)]
            starts = await worker_starts(valkey.url, image, forge, arguments.jobs, folder)
        finally:
            await forge.stop()
    both = [clone + run for clone, run in zip(clones, runs, strict=True)]
    print(f"a forge job to its container ({arguments.jobs} jobs, {arguments.files} files, cold clone each):")
    print(f"  git clone --depth 1          {spread(clones)}")
    print(f"  docker run --rm              {spread(runs)} (to its end: its first line is sooner)")
    print(f"  clone + run                  {spread(both)}")
    print(f"  worker: add → first line     {spread(starts)}")
    print(f"  ratio (medians)              {statistics.median(starts) / statistics.median(both):6.2f}×")


if __name__ == "__main__":
    asyncio.run(main())
