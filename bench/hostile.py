"""Hostile input against the real services, at full size: 10,000 generated jobs through a real worker, 1,000
hostile registry rows through the router and `hosts`, 1,000 hostile mirrored records through `runs`, colliding and
over-long job ids, a logs dir on a full tmpfs. Prints one line of figures per part (inputs tried, crashes, records
lost, overwritten, refusals by reason); exits 1 unless every part shows 0 crashes, 0 lost and 0 overwritten.

It runs the suite of tests/scenarios/test_hostile.py (the CI runs the same at the same size) and prints what it printed.
Usage: python bench/hostile.py [--jobs N]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    arguments = parser.parse_args()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "tests/scenarios/test_hostile.py"],
        cwd=REPO,
        env={**os.environ, "HOSTILE_JOBS": str(arguments.jobs)},
        capture_output=True,
        text=True,
        check=False,
    )
    for line in done.stdout.splitlines():
        if re.match(r"(jobs|rows|records|full-disk)\s+tried", line) or re.search(r"\d+ (passed|failed)", line):
            print(line)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
