"""Each OCI runtime a host's jobs need besides Docker's default (`core/runtimes.py`: PI_JOB_RUNTIME, runsc for
PI_RUNSC_PROFILES) tried once at boot: a container of the job image, under that runtime, with no network and every
capability dropped, must run `sh -c 'exit 0'` to its end. One that cannot (not registered with the daemon, gVisor
missing or failing on this kernel) is named in the worker's log with what Docker said; the host then does not serve
what needs it. The canary is labelled as this host's containers are, so a canary a crash left behind goes with the
next reap, and is removed at once otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from typing import TYPE_CHECKING, Final

import docker.errors
import requests.exceptions

from pi_dispatch.core.reasons import Reason
from pi_dispatch.core.runtimes import RuntimeChoice
from pi_dispatch.worker.run.containers import LABEL_FLEET, LABEL_HOST, LABEL_INSTANCE, LABEL_JOB

if TYPE_CHECKING:
    from pi_dispatch.config.worker_settings import WorkerSettings
    from pi_dispatch.infra.events import EventLog
    from pi_dispatch.worker.run.containers import ContainerRuntime

CANARY_S: Final = 60.0  # gVisor starts in well under a second here; only a hang reaches this
CANARY_JOB: Final = "runtime-canary"  # its job label: no job's id (a job id never has this form)
SAID_CHARS: Final = 300  # of what Docker said, in the log line and the row's reason
_FAULTS: Final = (docker.errors.DockerException, requests.exceptions.RequestException)
_PATH: Final = re.compile(r"/[^\s:;,'\"()]+")


async def try_runtimes(runtime: ContainerRuntime, image: str, names: tuple[str, ...]) -> dict[str, str | None]:
    """Each runtime's verdict: None when it ran the canary, else why not (in words, no path)."""
    return {name: await asyncio.to_thread(_canary, runtime, image, name) for name in names}


def _canary(runtime: ContainerRuntime, image: str, name: str) -> str | None:
    labels = {LABEL_JOB: CANARY_JOB, LABEL_HOST: runtime.host, LABEL_FLEET: runtime.fleet}
    labels[LABEL_INSTANCE] = runtime.instance
    container = None
    try:
        container = runtime.client.containers.create(
            image,
            entrypoint=["sh", "-c", "exit 0"],
            runtime=name,
            network_mode="none",
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            labels=labels,
            detach=True,
        )
        container.start()
        ended = container.wait(timeout=CANARY_S)
    except _FAULTS as error:
        return _said(error)
    finally:
        if container is not None:
            with contextlib.suppress(*_FAULTS):
                container.remove(force=True)
    code = ended.get("StatusCode") if isinstance(ended, dict) else None
    return None if code == 0 else f"its canary exited {code}"


def _said(error: BaseException) -> str:
    """What Docker said, on one line, without a path in it (names only in a log or a row)."""
    explained = getattr(error, "explanation", None) or str(error)
    return _PATH.sub("<path>", " ".join(str(explained).split()))[:SAID_CHARS]


async def boot_runtimes(
    runtime: ContainerRuntime, settings: WorkerSettings, log: EventLog
) -> tuple[RuntimeChoice, str | None]:
    """This host's runtimes once tried, and why it takes no job at all (its own runtime failed), or None."""
    choice = RuntimeChoice(settings.job_runtime, frozenset(settings.runsc_profiles))
    verdicts = await try_runtimes(runtime, settings.job_image, choice.needed())
    for name, said in verdicts.items():
        if said is not None:
            log("runtime_unavailable", {"runtime": name, "said": said})
    choice = choice.with_working(name for name, said in verdicts.items() if said is None)
    if choice.usable(choice.default):
        return choice, None
    return choice, (
        f"{Reason.JOB_RUNTIME_UNAVAILABLE}: PI_JOB_RUNTIME {choice.default} failed its canary "
        f"({verdicts.get(str(choice.default))}); fix: install it and register it with Docker "
        "(pi_dispatch_worker_gvisor for runsc), then restart the worker"
    )
