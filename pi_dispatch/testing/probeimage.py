"""The probe job image: a static busybox and a script that says, one `probe:` line each, what the worker gave its
job from inside (its user, its variables' names, its tokens by digest, the workspace's commit, the job's files)."""

from __future__ import annotations

import re
import shutil
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any, Final

from pi_dispatch.demo.jobimage import BUSYBOX

PROBE_IMAGE: Final = "pi-dispatch-probe-job:latest"
PROBE_LINE: Final = re.compile(r"(?:^|\s)probe: ([a-z_]+)=(.*)$", re.MULTILINE)  # after the kept output's stamp


def build_probe_image(client: Any, tag: str = PROBE_IMAGE) -> str:
    """Build (or reuse from the build cache) the probe image; returns its tag."""
    with tempfile.TemporaryDirectory(prefix="pi-probe-image-") as folder:
        context = Path(folder)
        source = resources.files("pi_dispatch") / "testing" / "probe"
        for name in ("Dockerfile", "probe"):
            (context / name).write_bytes((source / name).read_bytes())
        (context / "probe").chmod(0o755)
        shutil.copy2(BUSYBOX, context / "busybox")
        client.images.build(path=str(context), tag=tag, rm=True)
    return tag


def probed(output: str) -> dict[str, str]:
    """What a probe said, fact by fact."""
    return dict(PROBE_LINE.findall(output))
