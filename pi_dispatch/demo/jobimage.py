"""The example job image: a static busybox and a script, built on this host with no registry.

The demo, the tests and the benchmarks run real containers from it. Its entrypoint reads
`/job/event.json` and exits as the event's `demoExit` asks, so every exit-code path can be driven.
"""

from __future__ import annotations

import shutil
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any, Final

from pi_dispatch.core.errors import PiDispatchError
from pi_dispatch.infra.dockerclient import DockerUnreachable, docker_client

EXAMPLE_IMAGE: Final = "pi-dispatch-example-job:latest"
BUSYBOX: Final = Path("/bin/busybox")


class ImageBuildError(PiDispatchError):
    pass


def build_example_image(client: Any, tag: str = EXAMPLE_IMAGE, busybox: Path = BUSYBOX) -> str:
    """Build (or reuse from the build cache) the example image; returns its id."""
    if not busybox.is_file():
        raise ImageBuildError(f"{busybox} is missing: install Debian's busybox-static")
    with tempfile.TemporaryDirectory(prefix="pi-job-image-") as folder:
        context = Path(folder)
        source = resources.files("pi_dispatch") / "jobimage"
        for name in ("Dockerfile", "run-job"):
            (context / name).write_bytes((source / name).read_bytes())
        (context / "run-job").chmod(0o755)
        shutil.copy2(busybox, context / "busybox")
        image, _ = client.images.build(path=str(context), tag=tag, rm=True)
    return str(image.id)


def docker_problem() -> str | None:
    """Why job containers cannot run here, or None; builds the example image when they can."""
    import docker
    import docker.errors
    import requests.exceptions

    try:
        client = docker_client()
    except DockerUnreachable as unreachable:
        return str(unreachable)
    try:
        build_example_image(client)
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as error:
        return f"the example job image could not be built ({error})"
    finally:
        client.close()
    return None
