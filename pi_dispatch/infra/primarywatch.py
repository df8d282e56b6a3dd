"""Leaving a primary the moment the Sentinels replace it.

A connection waiting on a primary that has stopped answering (frozen by a SIGSTOP, a hung disk, a paused VM) waits
until that node answers again: BullMQ's connections have no read timeout (a blocking pop must be able to wait), so a
worker stays with a frozen primary for as long as it is frozen, long after the Sentinels have promoted another, and a
receiver's adds hang with it. The Sentinels announce each promotion on their `+switch-master` channel. The watch
listens on one Sentinel at a time and, on a switch of this store's primary, cuts every connection this process holds
to the old address (`infra/store.cut_connections_to`), as if that node had reset them: each command waiting there
fails as a lost connection, and its next try asks the Sentinels where the primary is now.

Without a Sentinel to listen to, nothing changes: connections leave the old primary as they did before, once it
answers or refuses them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

import redis.asyncio as aioredis

from pi_dispatch.infra.events import EventLog
from pi_dispatch.infra.sentinel import cut_connections_to
from pi_dispatch.infra.store import StoreAddress
from pi_dispatch.infra.supervise import Loop, OnFailure
from pi_dispatch.infra.valkey import OP_TIMEOUT_S, StoreUnavailable, describe, outages_named, reply_text

SWITCH_CHANNEL: Final = "+switch-master"
LISTEN_POLL_S: Final = 1.0  # how long one wait for a message lasts; a Sentinel that died is noticed at the next
PING_EVERY_POLLS: Final = 5  # a PING every 5 polls; one unanswered by the next is the Sentinel left for another
AGAIN_S: Final = 1.0  # when no Sentinel answers, the next round of them starts after this, then twice as long ...
AGAIN_MAX_S: Final = 8.0  # ... up to this: a switch in a Sentinels' outage is missed anyway


def primary_watch_loops(store: StoreAddress, log: EventLog) -> list[Loop]:
    """The watch as a process's supervised loop, for a replicated store (a plain one has no primary to leave)."""
    if not store.replicated:
        return []
    why = "a fresh subscription; meanwhile a frozen primary is left once it answers, as without the watch"
    return [Loop("primary-watch", PrimaryWatch(store, log).run, OnFailure.RESTART, why)]


def parse_switch(data: object, primary_name: str) -> tuple[str, int] | None:
    """The old primary's address in a `+switch-master` message (`<name> <old-ip> <old-port> <new-ip> <new-port>`)
    about this store's primary; None for another name or a message that is not one."""
    words = reply_text(data).split(" ") if isinstance(data, (bytes, str)) else []
    if len(words) != 5 or words[0] != primary_name or not (words[2].isascii() and words[2].isdigit()):
        return None
    return words[1], int(words[2])


@dataclass
class PrimaryWatch:
    """Listens for this store's promotions, one Sentinel at a time, and cuts the connections to each old primary."""

    store: StoreAddress
    log: EventLog
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    _listening: bool = False  # since the last failure, a Sentinel has been listened to

    async def run(self) -> None:
        """Never returns: a Sentinel lost or silent moves the watch to the next; after a round in which none answers,
        a pause that doubles up to AGAIN_MAX_S. Said once per outage: the Sentinel lost, then that none answers."""
        pause, quiet = AGAIN_S, False
        while True:
            for sentinel in self.store.sentinels:
                try:
                    with outages_named():
                        await self._listen(*sentinel)
                except StoreUnavailable as error:
                    if self._listening:
                        pause, quiet, self._listening = AGAIN_S, False, False
                    if not quiet:
                        self.log(
                            "primary_watch_moved",
                            {"sentinel": f"{sentinel[0]}:{sentinel[1]}", "reason": describe(error)},
                        )
            if not quiet:
                self.log("primary_watch_waiting", {"sentinels": len(self.store.sentinels), "againS": pause})
            quiet = True
            await self.sleep(pause)
            pause = min(pause * 2, AGAIN_MAX_S)

    async def _listen(self, host: str, port: int) -> None:
        sentinel = aioredis.Redis(
            host=host,
            port=port,
            password=self.store.sentinel_password or None,
            socket_timeout=OP_TIMEOUT_S,
            socket_connect_timeout=OP_TIMEOUT_S,
        )
        try:
            async with sentinel.pubsub(ignore_subscribe_messages=True) as pubsub:
                await pubsub.subscribe(SWITCH_CHANNEL)
                self._listening = True
                self.log("primary_watch_listening", {"sentinel": f"{host}:{port}"})
                polls, awaiting_pong = 0, False
                while True:
                    received = await pubsub.get_message(timeout=LISTEN_POLL_S) or {}
                    if received.get("type") == "message":
                        self._switched(received.get("data"))
                    elif received.get("type") == "pong":
                        awaiting_pong = False
                    polls += 1
                    if polls % PING_EVERY_POLLS == 0:
                        if awaiting_pong:  # a Sentinel whose host went away keeps the socket open and says nothing
                            raise TimeoutError(f"no answer to a PING in {PING_EVERY_POLLS * LISTEN_POLL_S:g} s")
                        await pubsub.ping()
                        awaiting_pong = True
        finally:
            await sentinel.aclose()

    def _switched(self, data: object) -> None:
        old = parse_switch(data, self.store.primary_name)
        if old is None:
            return
        cut = cut_connections_to(old)
        self.log("primary_switched", {"from": f"{old[0]}:{old[1]}", "connectionsCut": cut})
