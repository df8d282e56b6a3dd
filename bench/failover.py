"""A replicated store failing over under load: is anything acknowledged lost, does any job run twice at once, and how
long do the workers idle and the receiver refuse?

On loopback: three `redis-server` (a primary and two replicas: AOF every second, `noeviction`,
`min-replicas-to-write 1`, as the role deploys them) and three Sentinels (quorum 2), two real `pi-dispatch worker`
processes (the machine's Docker) and the product's receiver in a process of its own, all finding the primary through
the Sentinels. Signed GitHub deliveries flow at a steady rate before, during and after each fault:

  kill      the primary SIGKILLed
  failover  a manual failover (SENTINEL FAILOVER) with the old primary still reachable by every client
  cut       the primary cut off from its replicas and Sentinels (an iptables rule), still reachable by clients,
            and joined back once another is promoted
  freeze    the primary SIGSTOPped for 10 s: promoted away meanwhile, it wakes still taking writes (a worker's take
            of a job the new primary gave another) until the Sentinels demote it

One line per scenario and round:

    acknowledged | acked but lost | run twice at once | records missing | worker gap after promotion | refusals

`acked but lost`: answered 202 but its job is on no queue of the final primary. `worker gap`: from the promotion
until each worker starts a job container again (the larger of the two; a backlog waits throughout, so a worker that
does not start one is idle). `refusals`: from the receiver's first non-202
to its last. The goal: 0 lost and 0 run twice in every scenario, a gap of 5 s or less (the median over rounds).

    python bench/failover.py [--rounds 3] [--only kill failover cut freeze] [--rate 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys

import docker

from pi_dispatch.demo.jobimage import build_example_image
from pi_dispatch.testing.failover import GAP_GOAL_S, SCENARIOS, one_round


async def bench(rounds: int, scenarios: list[str], rate: float) -> int:
    client = docker.from_env()
    try:
        image = build_example_image(client)
    finally:
        client.close()
    gaps: dict[str, list[float]] = {scenario: [] for scenario in scenarios}
    failed = False
    for round_number in range(rounds):
        for scenario in scenarios:
            figures = await one_round(scenario, rate, image)
            print(f"round {round_number + 1}: {figures.line()}", flush=True)
            gaps[scenario].append(figures.gap_s)
            failed |= figures.lost > 0 or figures.run_twice > 0 or figures.records_missing > 0
    for scenario, values in gaps.items():
        print(
            f"{scenario}: worker gap after the promotion median {statistics.median(values):.1f} s "
            f"(range {min(values):.1f}-{max(values):.1f} s over {rounds} rounds; goal <= {GAP_GOAL_S:g} s)"
        )
    return 1 if failed else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", nargs="*", default=list(SCENARIOS), choices=SCENARIOS)
    parser.add_argument("--rate", type=float, default=5.0, help="deliveries per second")
    arguments = parser.parse_args()
    sys.exit(asyncio.run(bench(arguments.rounds, arguments.only, arguments.rate)))


if __name__ == "__main__":
    main()
