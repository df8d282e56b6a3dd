"""Example jobs and scripts for real workers: a GitHub forge job as the receiver enqueues it, a resolver script."""

from __future__ import annotations

from pathlib import Path
from typing import Any

RESOLVER = """#!/bin/sh
printf 'value-for-%s\\n' "$1"
"""


def write_script(path: Path, body: str) -> str:
    path.write_text(body)
    path.chmod(0o755)
    return str(path)


def forge_job(number: int, **fields: Any) -> dict[str, Any]:
    """A github forge job's data as the receiver enqueues it; trigger fields (demoExit, demoSleep) via trigger=."""
    trigger = {
        "deliveryId": f"d-{number}",
        "matched": {"index": 0, "type": "label", "label": "pi"},
        "sender": {"id": 1},
    }
    trigger.update(fields.pop("trigger", {}))
    return {
        "kind": "github",
        "repo": "acme/app",
        "target": {"type": "issue", "number": number, "title": "t", "body": "b"},
        "flow": "triage",
        "trigger": trigger,
        "provider": "anthropic",
        "model": "m",
        "maxTurns": 5,
        **fields,
    }
