"""The store's users: one per kind of process, each allowed what that process does and nothing of the store's own
administration, written as the store's ACL lines.

The store's `default` user stays the operator's: its password is the store's (`requirepass`), the one replicas and
Sentinels present too, and it may run every command. A worker, a receiver and a console each log in as a user of
their own instead (the user in VALKEY_URL, its password VALKEY_PASSWORD), so the env file of one host, leaked, gives
what that host's process could do and no more. None of them may run a command Valkey counts as @admin or @dangerous:
CONFIG (whose GET reads every password the store holds), ACL, DEBUG, MONITOR, SHUTDOWN, REPLICAOF, FLUSHALL, KEYS,
MIGRATE, CLIENT KILL and the like; INFO alone is given back (BullMQ reads the server's version from it, and the
fleet its replication state). Beyond that:

- a **worker** runs BullMQ's scripts on every queue and keeps the registry, the records, the windows and the control
  facts: every key, and the control channel;
- a **receiver** adds jobs to the fleet's queues and remembers the deliveries it has seen and its own spool's state;
  every other key (the registry it routes by, the drained hosts, the windows) it may only read;
- a **console** reads everything and writes only what an operator's action writes: a job moved on its queue, a
  control fact and its announcement, the record of a job cancelled before it ran, the trail of actions.

The rules were found by running each process against a store that grants them and nothing else, and reading what the
store refused (`tests/scenarios/test_store_users.py` keeps that true: its store's ACL LOG stays empty).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from pi_dispatch.core.keys import (
    BULL_PREFIX,
    CANCEL_PREFIX,
    CONTROL_CHANNEL,
    DRAIN_PREFIX,
    DRAINED_HOSTS,
    RECEIVERS,
    RUN_ATTEMPTS_PREFIX,
    RUN_RECORD_PREFIX,
    RUNS_INDEX,
    SHARED_QUEUE,
    TRAIL_KEY,
    delivery_seen_key,
)

# What every one of them may run: anything but the store's administration, with INFO given back.
COMMANDS: Final = ("+@all", "-@admin", "-@dangerous", "+info")
QUEUES: Final = f"~{BULL_PREFIX}:{SHARED_QUEUE}*"  # the shared queue's keys and every host queue's (`pi-jobs@<name>`)


@dataclass(frozen=True)
class StoreUser:
    """One kind of process's user: `role` as the inventory names it, `name` as the store knows it."""

    role: str
    name: str
    keys: tuple[str, ...]  # the keys it may read (%R~) or read and write (~)
    channels: tuple[str, ...] = ()  # the Pub/Sub channels it may use (&): none unless said

    def acl_line(self, password: str) -> str:
        """The user as an ACL file line: reset first (so a changed rule or password replaces the old), the
        password only as its SHA-256."""
        digest = password_digest(password)
        return " ".join(("user", self.name, "reset", "on", f"#{digest}", *self.keys, *self.channels, *COMMANDS))

    def setuser(self, password: str) -> list[str]:
        """The same as the arguments of ACL SETUSER."""
        return ["ACL", "SETUSER", *self.acl_line(password).split()[1:]]


WORKER: Final = StoreUser("worker", "pi-worker", ("~*",), ("&*",))
RECEIVER: Final = StoreUser("receiver", "pi-receiver", ("%R~*", QUEUES, f"~{delivery_seen_key('*')}", f"~{RECEIVERS}"))
CONSOLE: Final = StoreUser(
    "console",
    "pi-console",
    (
        "%R~*",
        QUEUES,
        f"~{CANCEL_PREFIX}*",
        f"~{DRAIN_PREFIX}*",
        f"~{DRAINED_HOSTS}",
        f"~{TRAIL_KEY}",
        f"~{RUN_RECORD_PREFIX}*",
        f"~{RUN_ATTEMPTS_PREFIX}*",
        f"~{RUNS_INDEX}",
    ),
    (f"&{CONTROL_CHANNEL}",),
)
STORE_USERS: Final = (WORKER, RECEIVER, CONSOLE)
ROLES: Final = tuple(user.role for user in STORE_USERS)


def reads_configuration(username: str | None) -> bool:
    """Whether a client logged in as `username` asks the store's configuration (CONFIG GET): the operator's
    (the default user, or one of their own), never one of the fleet's users, whom the store refuses it."""
    return username not in {user.name for user in STORE_USERS}


def password_digest(password: str) -> str:
    return hashlib.sha256(password.encode()).hexdigest()


def acl_file(admin_password: str, passwords: Mapping[str, str]) -> str:
    """The store's ACL file: the operator's `default` user with the store's password, then each role given a
    password. ValueError names a role that is not one, or a password shorter than 16 characters."""
    unknown = sorted(set(passwords) - set(ROLES))
    if unknown:
        raise ValueError(f"no store user for {', '.join(unknown)}: the roles are {', '.join(ROLES)}")
    short = sorted(role for role, password in passwords.items() if len(password) < 16)
    if short or len(admin_password) < 16:
        named = ", ".join(short) or "the store's own"
        raise ValueError(f"a store password shorter than 16 characters: {named}")
    lines = [f"user default reset on #{password_digest(admin_password)} ~* &* +@all"]
    lines += [user.acl_line(passwords[user.role]) for user in STORE_USERS if user.role in passwords]
    return "\n".join(lines) + "\n"
