"""The replicated store's failover proof, one round of the `kill` scenario that `bench/failover.py` runs in all four
(`python bench/failover.py --rounds 3`; `pytest -m bench` here runs one round of each of the other three, `freeze`
among them: the primary SIGSTOPped past its promotion, then woken): three real redis-server, three Sentinels, two
real workers on the machine's Docker, the receiver in its own process, deliveries flowing while the primary is
SIGKILLed. No acknowledged delivery lost, no job run twice at once, no record missing.

The other scenarios' own mechanics are proven without the load: the count that confirms a write after a manual
failover and after a cut-off, a take confirmed only where the Sentinels name the primary (`tests/infra/test_store.py`),
and the Sentinels' promotion in each
(`tests/infra/test_store.py`, `pi_dispatch.testing.replicated`)."""

from __future__ import annotations

import math

import pytest

from pi_dispatch.testing.failover import one_round


@pytest.mark.docker
@pytest.mark.redis
@pytest.mark.slow
@pytest.mark.timeout(600)  # a round takes about a minute; its own waits are bounded, this is for a hang
@pytest.mark.parametrize(
    "scenario",
    ["kill", *(pytest.param(scenario, marks=pytest.mark.bench) for scenario in ("failover", "cut", "freeze"))],
)
async def test_a_failover_loses_no_acknowledged_delivery_and_runs_no_job_twice_at_once(
    scenario: str, job_image: str
) -> None:
    figures = await one_round(scenario, rate=5.0, image=job_image)
    print(figures.line())  # the figures, in CI's log
    assert figures.acknowledged > 0, figures.line()
    assert (figures.lost, figures.run_twice, figures.records_missing) == (0, 0, 0), figures.line()
    assert figures.unsettled == 0, figures.line()
    assert math.isfinite(figures.gap_s), figures.line()  # each worker ran jobs after the promotion
