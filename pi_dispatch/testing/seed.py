"""The reference's own modules, taken from the seed diff at test time and run under node."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

SEED_MODULES = ("capabilities.mjs", "run-mirror.mjs")

HARNESS = """
import { readFileSync } from "node:fs";
const caps = await import(process.argv[2]);
const mirror = await import(process.argv[3]);
const cases = JSON.parse(readFileSync(0, "utf8"));
const call = {
  capabilityTokens: (a) => caps.capabilityTokens(a.profiles),
  serializeCaps: (a) => caps.serializeCaps(a.tokens),
  parseCaps: (a) => [...caps.parseCaps(a.raw)],
  jobNeeds: (a) => caps.jobNeeds(a.job),
  routeForgeJob: (a) => caps.routeForgeJob(a.options),
  mirrorWindowMs: (a) => mirror.mirrorWindowMs(a.days),
  mergeRuns: (a) => mirror.mergeRuns(a.local, a.mirrored, a.options),
  hostsIn: (a) => mirror.hostsIn(a.runs),
};
const out = cases.map(([fn, args]) => {
  try { return { ok: call[fn](args) ?? null }; } catch (err) { return { threw: String(err?.message ?? err) }; }
});
process.stdout.write(JSON.stringify(out));
"""


def node_binary() -> str | None:
    return shutil.which("node")


def extract_seed_modules(diff: Path, into: Path) -> dict[str, Path]:
    """Write each new module of the seed diff (its `+` lines) to a file of its own."""
    text = diff.read_text(encoding="utf-8")
    written: dict[str, Path] = {}
    for name in SEED_MODULES:
        match = re.search(rf"^package/src/{re.escape(name)}\n\n@@ -0,0 \+1,(\d+) @@\n", text, re.MULTILINE)
        if match is None:
            raise AssertionError(f"{name} is not a new file in {diff}")
        lines = text[match.end() :].split("\n")[: int(match.group(1))]
        assert all(line.startswith("+") for line in lines), f"{name}: unexpected hunk shape"
        path = into / name
        path.write_text("\n".join(line[1:] for line in lines) + "\n", encoding="utf-8")
        written[name] = path
    return written


def run_seed(node: str, modules: dict[str, Path], harness_dir: Path, cases: list[tuple[str, Any]]) -> list[Any]:
    """Evaluate every case under the seed's own code; each answer is {"ok": value} or {"threw": message}."""
    harness = harness_dir / "harness.mjs"
    harness.write_text(HARNESS, encoding="utf-8")
    completed = subprocess.run(
        [node, str(harness), modules["capabilities.mjs"].as_uri(), modules["run-mirror.mjs"].as_uri()],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=120,
        env={"TZ": "UTC", "PATH": "/usr/bin:/bin"},
        check=True,
    )
    answers: list[Any] = json.loads(completed.stdout)
    return answers
