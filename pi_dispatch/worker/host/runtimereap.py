"""`pi-dispatch runtime-reap` (root): what a failed runsc start left behind, gone.

With Docker 20.10 and Debian's runsc, a container whose start fails under runsc is removed from Docker, but its
containerd container, its shim and sometimes gVisor's sandbox and gofer stay, for as long as the host runs (measured
on these machines; runc leaves nothing). Docker no longer knows them, so neither the worker's reap nor any Docker call
can reach them: this asks containerd (through its own `ctr`, on the socket Docker uses) for the containers in
Docker's namespace that Docker does not know and that ran under runsc, and kills and deletes each, which ends its
shim and sandbox. The worker's unit runs it as root before each start (so the next reap leaves nothing behind); an
operator may run it any time.
"""

from __future__ import annotations

import base64
import binascii
import json
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

from pi_dispatch.core.errors import PiDispatchError
from pi_dispatch.core.runtimes import RUNSC

# the socket of the containerd Docker uses: Debian's system one, else the one dockerd runs itself
SOCKETS: Final = ("/run/containerd/containerd.sock", "/var/run/docker/containerd/containerd.sock")
NAMESPACE: Final = "moby"  # Docker's, in containerd
CTR_S: Final = 30.0
BINARY_FIELD: Final = 6  # of runc's options: the runtime's binary
ROOT_FIELD: Final = 7  # and its state's root, under which runsc keeps each namespace's containers
DOCKER_RUNTIME_ROOT: Final = "/var/run/docker/runtime-runc"  # Docker's, when the options name none

Runner = Callable[..., Any]


class ReapError(PiDispatchError):
    """containerd could not be asked, or refused a step."""


def runc_options(info: object) -> dict[int, str]:
    """The text fields of a containerd container's runc options (`ctr containers info`), by field number: Docker puts
    the runtime's binary in 6 (`binary_name`) and its state's root in 7 (`root`); containerd keeps them encoded
    (protobuf), so they are read here as the length-delimited fields they are."""
    runtime = info.get("Runtime") if isinstance(info, dict) else None
    options = runtime.get("Options") if isinstance(runtime, dict) else None
    encoded = options.get("value") if isinstance(options, dict) else None
    try:
        data = base64.b64decode(str(encoded or ""), validate=True)
    except (binascii.Error, ValueError):
        return {}
    fields: dict[int, str] = {}
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        if key & 7 == 2:  # length-delimited: a string
            size, at = _varint(data, at)
            fields[key >> 3] = data[at : at + size].decode(errors="replace")
            at += size
        elif key & 7 == 0:  # a number (a flag): skipped
            _, at = _varint(data, at)
        else:
            break  # nothing Docker writes: the rest is not read
    return fields


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while at < len(data):
        byte = data[at]
        value, shift, at = value | (byte & 0x7F) << shift, shift + 7, at + 1
        if not byte & 0x80:
            break
    return value, at


def ran_under_runsc(info: object) -> bool:
    """Whether a containerd container ran under runsc (its runtime's binary, as Docker named it, is runsc's)."""
    return RUNSC in runc_options(info).get(BINARY_FIELD, "")


def orphans(listed: Sequence[str], known: set[str], infos: dict[str, object]) -> list[str]:
    """The containerd containers Docker does not know that ran under runsc."""
    return [cid for cid in listed if cid not in known and ran_under_runsc(infos.get(cid))]


def reap_runsc(docker_ids: Callable[[], set[str]], run: Runner) -> list[str]:
    """Stop and delete each orphan a failed runsc start left; returns their ids. Raises ReapError when containerd
    cannot be asked."""
    ctr = shutil.which("ctr")
    socket = next((path for path in SOCKETS if Path(path).is_socket()), None)
    if ctr is None or socket is None:
        raise ReapError("no containerd to ask (its ctr and socket come with Docker's containerd)")
    base = [ctr, "--address", socket, "--namespace", NAMESPACE]
    listed = _ctr(run, [*base, "containers", "list", "--quiet"]).split()
    known = docker_ids()  # after containerd's list: a container made meanwhile is Docker's before it is containerd's
    infos = {cid: _json(_ctr(run, [*base, "containers", "info", cid])) for cid in listed if cid not in known}
    found = orphans(listed, known, infos)
    runsc = shutil.which(RUNSC) or RUNSC
    for cid in found:
        root = f"{runc_options(infos[cid]).get(ROOT_FIELD) or DOCKER_RUNTIME_ROOT}/{NAMESPACE}"
        # runsc's own delete stops a sandbox still "created" (which no signal reaches); containerd then lets its task
        # go, which ends the shim. A step with nothing to do fails, and is not needed.
        for argv in ([runsc, "--root", root, "delete", "--force", cid], [*base, "tasks", "delete", "--force", cid]):
            _ran(run, argv)
        _ctr(run, [*base, "containers", "delete", cid])
    return found


def _ran(run: Runner, argv: list[str]) -> Any:
    try:
        return run(argv, capture_output=True, text=True, timeout=CTR_S, check=False)
    except subprocess.TimeoutExpired:
        raise ReapError(f"{Path(argv[0]).name} did not answer within {CTR_S:.0f} s") from None


def _ctr(run: Runner, argv: list[str]) -> str:
    done = _ran(run, argv)
    if done.returncode != 0:
        raise ReapError(f"ctr {argv[5]} {argv[6]} failed: {' '.join(done.stderr.split())[:200]}")
    return str(done.stdout)


def _json(text: str) -> object:
    """ctr's JSON, or None for anything else (then nothing is deleted on its account)."""
    try:
        return json.loads(text)
    except ValueError:
        return None
