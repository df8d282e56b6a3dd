"""The replicated store's failover proof, run in CI as `bench/failover.py` runs it (one round per scenario): three
real redis-server, three Sentinels, two real workers on the machine's Docker, the receiver in its own process,
deliveries flowing. Every scenario: no acknowledged delivery lost, no job run twice at once, no record missing."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINE = re.compile(
    r"round 1: (?P<scenario>\w+)\s+acknowledged\s+(?P<acked>\d+) \| acked but lost (?P<lost>\d+) \| run twice at once "
    r"(?P<twice>\d+) \| records missing (?P<missing>\d+) \| worker gap\s+(?P<gap>[\d.]+|nan|inf) s"
)


@pytest.mark.docker
@pytest.mark.redis
@pytest.mark.slow
@pytest.mark.timeout(600)  # three scenarios of about a minute each; the bench's own waits bound them
def test_a_failover_loses_no_acknowledged_delivery_and_runs_no_job_twice_at_once(job_image: str) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "failover.py"), "--rounds", "1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=580,
        check=False,
    )
    print(done.stdout)  # the figures, in CI's log
    rounds = {match["scenario"]: match for match in LINE.finditer(done.stdout)}
    assert set(rounds) == {"kill", "failover", "cut"}, done.stdout + done.stderr[-3000:]
    for scenario, figures in rounds.items():
        assert int(figures["acked"]) > 0, scenario
        assert (figures["lost"], figures["twice"], figures["missing"]) == ("0", "0", "0"), scenario
        assert figures["gap"] not in ("nan", "inf"), scenario  # each worker ran jobs after the promotion
    assert done.returncode == 0, done.stderr[-3000:]
