"""The console's audit page: `pi-dispatch audit --inventory F --live --json` of the inventory its settings name
(PI_CONSOLE_INVENTORY), run as the command line runs it, in a child process: the inventory's loader (ansible-core,
the controller extra) never enters the console's own memory, and the findings are exactly the command's.

The store is handed to the child in its environment (never on its command line); one audit runs at a time, and its
report is kept AUDIT_FRESH_S so a page reloaded in a hurry does not start another.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from aiohttp import web

from pi_dispatch.console.plaintext import plain
from pi_dispatch.infra.store import StoreAddress, store_environ

AUDIT_CEILING_S: Final = 120.0  # an audit reads the inventory and one registry snapshot: seconds, unless hung
AUDIT_FRESH_S: Final = 15.0
FINDINGS_EXIT: Final = (0, 1)  # no finding at --fail-on, or some: the report is on stdout either way


@dataclass(frozen=True)
class AuditRead:
    """The audit's report (as `audit --json` prints it), or why there is none."""

    report: dict[str, Any] | None
    problem: str = ""
    at: float = field(default_factory=time.monotonic)


class Auditor:
    """Runs the audit of one inventory against one store, one at a time, its report kept a little while."""

    def __init__(self, inventory: Path | None, store: StoreAddress) -> None:
        self.inventory, self.store = inventory, store
        self._lock = asyncio.Lock()
        self._last: AuditRead | None = None

    async def read(self) -> AuditRead:
        if self.inventory is None:
            return AuditRead(None, "no inventory is set: PI_CONSOLE_INVENTORY names the fleet's Ansible inventory")
        async with self._lock:
            if self._last is None or time.monotonic() - self._last.at > AUDIT_FRESH_S:
                self._last = await self._run(self.inventory)
            return self._last

    async def _run(self, inventory: Path) -> AuditRead:
        environment = {name: value for name, value in os.environ.items() if not name.startswith("VALKEY_")}
        command = [sys.executable, "-m", "pi_dispatch", "audit", "--inventory", str(inventory), "--live", "--json"]
        child = await asyncio.create_subprocess_exec(
            *command,
            env={**environment, **store_environ(self.store)},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(child.communicate(), AUDIT_CEILING_S)
        except TimeoutError:
            return AuditRead(None, f"the audit did not end within {AUDIT_CEILING_S:.0f} s")
        finally:
            if child.returncode is None:  # past its ceiling, or the page's reader left: it goes too
                child.kill()
                await child.wait()
        if child.returncode in FINDINGS_EXIT:
            try:
                return AuditRead(json.loads(out))
            except ValueError:
                pass
        said = err.decode("utf-8", "replace").strip().splitlines()
        return AuditRead(None, plain(said[-1] if said else f"the audit ended with exit {child.returncode}", 400))


AUDITOR: Final = web.AppKey("auditor", Auditor)
