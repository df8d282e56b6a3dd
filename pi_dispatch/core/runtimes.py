"""Which OCI runtime a job's container runs under: the host's (`PI_JOB_RUNTIME`, Docker's default when unset), or
gVisor's `runsc` for a job binding one of `PI_RUNSC_PROFILES`; and what a host serves once its runtimes have been
tried (a canary at boot): a profile whose runtime failed is not advertised, so routing sends its jobs elsewhere, and
a host whose own runtime failed takes no job. The host decides from the profiles a job binds, never from the job.
Pure.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

RUNSC: Final = "runsc"  # gVisor's
RUNTIME_NAME_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")  # a Docker runtime's name (PI_JOB_RUNTIME)
ROW_FIELD: Final = "runtimes"  # the registry row's: the runtimes this host has tried and can run, comma separated


@dataclass(frozen=True)
class RuntimeChoice:
    """A host's runtimes: its own for every job (None: Docker's default), runsc for some profiles', and those that
    passed their canary."""

    default: str | None = None
    runsc_profiles: frozenset[str] = frozenset()
    working: frozenset[str] = field(default_factory=frozenset)

    def needed(self) -> tuple[str, ...]:
        """The runtimes to try at boot, besides Docker's default."""
        return tuple(sorted({*([self.default] if self.default else []), *([RUNSC] if self.runsc_profiles else [])}))

    def for_profiles(self, profiles: Iterable[str]) -> str | None:
        """The runtime a job binding `profiles` runs under (None: Docker's default)."""
        return RUNSC if self.runsc_profiles.intersection(profiles) else self.default

    def usable(self, runtime: str | None) -> bool:
        return runtime is None or runtime in self.working

    def unserved(self) -> frozenset[str]:
        """The profiles this host declares but cannot serve: those whose runtime failed (all, when its own did)."""
        return self.runsc_profiles if not self.usable(RUNSC) else frozenset()

    def with_working(self, working: Iterable[str]) -> RuntimeChoice:
        return RuntimeChoice(self.default, self.runsc_profiles, frozenset(working))


def row_runtimes(raw: object) -> frozenset[str]:
    """A registry row's `runtimes`, each name as a runtime name may be written (another process wrote it)."""
    if not isinstance(raw, str | bytes):
        return frozenset()
    text = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
    return frozenset(name for name in text.split(",") if RUNTIME_NAME_RE.fullmatch(name))


def daemon_json_with_runsc(current: str, flags: str) -> str:
    """Docker's daemon.json with runsc registered as the runsc runtime with these flags (space separated), everything
    else in it kept; what the role writes. Raises ValueError when the current file is not a JSON object."""
    config = json.loads(current) if current.strip() else {}
    if not isinstance(config, dict) or not isinstance(config.get("runtimes", {}), dict):
        raise ValueError("/etc/docker/daemon.json is not a JSON object with an object of runtimes")
    config.setdefault("runtimes", {})[RUNSC] = {"path": RUNSC, "runtimeArgs": flags.split()}
    return json.dumps(config, indent=2, sort_keys=True) + "\n"
