"""What the rolling-upgrade check needs from the store, as the controller sees it (VALKEY_PASSWORD, and the
VALKEY_SENTINELS of a replicated store, from the env).

  enqueue URL COUNT SECONDS PREFIX   add COUNT jobs that each run SECONDS to the shared queue (ids PREFIX-<n>)
  sample URL OUT STOP                every second until the file STOP exists: how many workers serve (a fresh row,
                                     a consumer that polls and is not stuck), appended to OUT as "<ms> <count>
                                     <names>", or "<ms> - <why>" when the registry could not be read
  settled URL COUNT PREFIX           wait until those jobs are completed; print each job's state as JSON
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

from bullmq import Queue

from pi_dispatch.core.capabilities import is_live, is_stuck
from pi_dispatch.fleet.liveness import POLL_SILENCE_S
from pi_dispatch.fleet.registry import LiveHosts, read_live_hosts
from pi_dispatch.infra.store import store_from_environ


def job(number: int, seconds: int) -> dict[str, object]:
    return {
        "kind": "github",
        "repo": "acme/app",
        "target": {"type": "issue", "number": number, "title": "rollout", "body": ""},
        "flow": "triage",
        "trigger": {"deliveryId": f"rollout-{number}", "matched": {"index": 0, "type": "label"}, "demoSleep": seconds},
    }


async def enqueue(url: str, count: int, seconds: int, prefix: str) -> None:
    queue = Queue("pi-jobs", {"connection": store_from_environ(url=url).queue_connection()})
    for number in range(count):
        await queue.add("github", job(number, seconds), {"jobId": f"{prefix}-{number}", "attempts": 2})
    await queue.close()


async def sample(url: str, out: Path, stop: Path) -> None:
    client = store_from_environ(url=url).client()
    deadline = time.monotonic() + 1_200
    while not stop.exists() and time.monotonic() < deadline:
        now = int(time.time() * 1000)
        live = await read_live_hosts(client, prune=False)  # read only: the sampler never changes what it watches
        if not isinstance(live, LiveHosts):
            with out.open("a") as file:
                file.write(f"{now} - {live.reason}\n")
            await asyncio.sleep(1)
            continue
        serving = [
            row
            for row in live.hosts
            if is_live(row)
            and not is_stuck(row)
            and str(row.get("polledAt") or "").isdigit()
            and (now - int(str(row["polledAt"]))) / 1000 <= POLL_SILENCE_S
        ]
        with out.open("a") as file:
            file.write(f"{now} {len(serving)} {','.join(str(row['name']) for row in serving)}\n")
        await asyncio.sleep(1)
    await client.aclose()


async def settled(url: str, count: int, prefix: str) -> None:
    queue = Queue("pi-jobs", {"connection": store_from_environ(url=url).queue_connection()})
    deadline = time.monotonic() + 300
    while True:
        states = {f"{prefix}-{n}": await queue.getJobState(f"{prefix}-{n}") for n in range(count)}
        if all(state == "completed" for state in states.values()) or time.monotonic() > deadline:
            break
        await asyncio.sleep(1)
    await queue.close()
    print(json.dumps(states))


def main() -> None:
    command, url, *rest = sys.argv[1:]
    if command == "enqueue":
        asyncio.run(enqueue(url, int(rest[0]), int(rest[1]), rest[2]))
    elif command == "sample":
        asyncio.run(sample(url, Path(rest[0]), Path(rest[1])))
    elif command == "settled":
        asyncio.run(settled(url, int(rest[0]), rest[1]))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
