"""How interactive the audit stays: 1,000 hosts and 10,000 triggers, against just loading that inventory.

Writes a generated inventory (hosts.yml plus host_vars/) and triggers.json to a temporary directory,
then times, in the same run: loading the inventory through ansible-core, loading the triggers, and the
audit itself. Prints the ratio of audit time to inventory load time.

    python bench/audit.py [--hosts 1000] [--triggers 10000]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

from pi_dispatch.audit.placement import audit
from pi_dispatch.fleet.inventory import load_inventory
from pi_dispatch.triggers.file import load_triggers

REPO = Path(__file__).resolve().parent.parent

SECRETS = [f"vault{i}" for i in range(12)]
WAITS = [f"ci{i}" for i in range(6)]


def write_fleet(root: Path, hosts: int, triggers: int, rng: random.Random) -> tuple[Path, Path]:
    (root / "host_vars").mkdir(parents=True)
    names = [f"mini{index:04d}" for index in range(hosts)]
    host_lines = "\n".join(f"        {name}:" for name in names)
    (root / "hosts.yml").write_text(f"all:\n  children:\n    pi_dispatch_workers:\n      hosts:\n{host_lines}\n")
    for index, name in enumerate(names):
        lines = [f"pi_dispatch_worker_name: {name}"] if index % 10 else []
        secret = rng.sample(SECRETS, rng.randrange(0, 3))
        wait = rng.sample(WAITS, rng.randrange(0, 2))
        if secret:
            lines += ["pi_dispatch_worker_secret_profiles:", *(f"  {p}: /opt/pi/{p}.sh" for p in secret)]
        if wait:
            lines += ["pi_dispatch_worker_wait_profiles:", *(f"  {p}: /opt/pi/{p}.sh" for p in wait)]
        (root / "host_vars" / f"{name}.yml").write_text("\n".join(lines) + "\n")
    entries = []
    for _ in range(triggers):
        run: dict[str, object] = {"kind": "github", "flow": "fix"}
        if rng.random() < 0.5:
            run["secretsProfile"] = rng.choice([*SECRETS, "missing"])
            run["secrets"] = {"TOKEN": "token"}
        if rng.random() < 0.3:
            run["waitFor"] = [{"profile": rng.choice(WAITS)}]
        entries.append({"on": {"type": "label", "any": ["pi"]}, "run": run})
    (root / "triggers.json").write_text(json.dumps({"triggers": entries}))
    return root / "hosts.yml", root / "triggers.json"


def timed(label: str, work):  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    result = work()
    elapsed = time.perf_counter() - started
    print(f"  {label:<28}{elapsed:8.2f} s")
    return result, elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--triggers", type=int, default=10_000)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pi-dispatch-bench-") as scratch:
        inventory, triggers_file = write_fleet(Path(scratch), options.hosts, options.triggers, random.Random(7))
        print(f"audit of {options.hosts:,} hosts x {options.triggers:,} triggers")
        hosts, load_s = timed("load inventory (ansible-core)", lambda: load_inventory(inventory))
        triggers, triggers_s = timed("load triggers.json", lambda: load_triggers(triggers_file))
        report, audit_s = timed("audit", lambda: audit(hosts, triggers))
    print(f"  findings: {report.count('error')} error, {report.count('warning')} warning, {report.count('info')} info")
    print(f"  ratio audit/inventory load: {audit_s / load_s:.2f}x; whole command {load_s + triggers_s + audit_s:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
