"""A replicated store on loopback for tests and benches: a primary, its replicas and three Sentinels, all real
`redis-server` processes (a Sentinel is `redis-server --sentinel`), with the faults a failover is proven against:
the primary killed, a failover asked for while it is still reachable, and the primary cut off from its replicas and
Sentinels while its clients still reach it.

The cut is an `iptables` rule on the primary's port for the packets of one user: the store's processes run as
`nobody` when this runs as root, so the rule drops what a replica or Sentinel sends the primary and nothing a client
(this process and its children) sends.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import redis

from pi_dispatch.demo.store import free_port
from pi_dispatch.infra.store import StoreAddress

NOBODY: Final = 65534
PRIMARY_NAME: Final = "pi-dispatch"
DOWN_AFTER_MS: Final = 1_000  # how long a silent primary is given before the Sentinels vote: loopback is quick
FAILOVER_TIMEOUT_MS: Final = 4_000
# A ceiling only a hang reaches: a Sentinel whose timer was held up (a loaded machine) enters TILT for 30 s, in which it
# neither promotes nor reconfigures anyone, and then does its work.
SETTLE_CEILING_S: Final = 75.0


@dataclass
class Node:
    port: int
    folder: Path
    process: subprocess.Popen[bytes] | None = None


@dataclass
class ReplicatedStore:
    """`replicas` replicas of one primary, watched by `sentinels` Sentinels with quorum 2."""

    replicas: int = 2
    sentinels: int = 3
    password: str | None = None
    min_replicas_to_write: int = 0
    data: list[Node] = field(default_factory=list)
    watchers: list[Node] = field(default_factory=list)
    _cuts: list[list[str]] = field(default_factory=list)
    # a folder of its own that `nobody` can reach (a test's tmp_path sits in a folder only root may enter)
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="pi-dispatch-replicated-")))

    def __post_init__(self) -> None:
        self.root.chmod(0o755)

    @property
    def as_nobody(self) -> bool:
        return os.geteuid() == 0 and shutil.which("setpriv") is not None

    def address(self, database: int = 0) -> StoreAddress:
        return StoreAddress(
            url=f"redis://127.0.0.1/{database}",
            password=self.password,
            sentinels=tuple(("127.0.0.1", node.port) for node in self.watchers),
            primary_name=PRIMARY_NAME,
        )

    def env(self) -> dict[str, str]:
        """The variables a worker, receiver or CLI is given to use this store."""
        values = {
            "VALKEY_URL": "redis://127.0.0.1/0",
            "VALKEY_SENTINELS": ",".join(f"127.0.0.1:{node.port}" for node in self.watchers),
            "VALKEY_PRIMARY_NAME": PRIMARY_NAME,
        }
        return values | ({"VALKEY_PASSWORD": self.password} if self.password else {})

    def _spawn(self, command: list[str], folder: Path) -> subprocess.Popen[bytes]:
        if self.as_nobody:
            command = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *command]
        with (folder / "server.log").open("ab") as log:
            return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def _folder(self, name: str) -> Path:
        folder = self.root / name
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o777)
        return folder

    def _data_command(self, node: Node, primary: Node | None) -> list[str]:
        binary = shutil.which("redis-server") or "redis-server"
        command = [binary, "--port", str(node.port), "--bind", "127.0.0.1", "--dir", str(node.folder)]
        command += ["--save", "", "--appendonly", "yes", "--appendfsync", "everysec"]
        command += ["--maxmemory-policy", "noeviction", "--repl-diskless-sync", "yes"]
        command += ["--repl-diskless-sync-delay", "0", "--min-replicas-max-lag", "2"]
        command += ["--min-replicas-to-write", str(self.min_replicas_to_write)]
        if self.password:
            command += ["--requirepass", self.password, "--masterauth", self.password]
        if primary is not None:
            command += ["--replicaof", "127.0.0.1", str(primary.port)]
        return command

    def start(self, timeout_s: float = 30.0) -> None:
        self.data = [Node(free_port(), self._folder(f"data{index}")) for index in range(1 + self.replicas)]
        primary = self.data[0]
        for node in self.data:
            command = self._data_command(node, None if node is primary else primary)
            node.process = self._spawn(command, node.folder)
        self.watchers = [Node(free_port(), self._folder(f"sentinel{index}")) for index in range(self.sentinels)]
        for node in self.watchers:
            conf = node.folder / "sentinel.conf"
            lines = [f"port {node.port}", "bind 127.0.0.1", f"dir {node.folder}"]
            lines += [f"sentinel monitor {PRIMARY_NAME} 127.0.0.1 {primary.port} 2"]
            lines += [f"sentinel down-after-milliseconds {PRIMARY_NAME} {DOWN_AFTER_MS}"]
            lines += [f"sentinel failover-timeout {PRIMARY_NAME} {FAILOVER_TIMEOUT_MS}"]
            lines += [f"sentinel auth-pass {PRIMARY_NAME} {self.password}"] if self.password else []
            conf.write_text("\n".join(lines) + "\n")
            conf.chmod(0o666)
            binary = shutil.which("redis-server") or "redis-server"
            node.process = self._spawn([binary, str(conf), "--sentinel"], node.folder)
        self.wait_settled(timeout_s)

    def _data_client(self, node: Node) -> redis.Redis:
        return redis.Redis(port=node.port, password=self.password, socket_timeout=1, socket_connect_timeout=1)

    @staticmethod
    def _ask(watcher: Node, *command: str) -> Any:
        """A SENTINEL command's raw reply (redis-py's parsers for some of them fail on 6.x)."""
        client = redis.Redis(port=watcher.port, socket_timeout=1, decode_responses=True)
        try:
            return client.execute_command("SENTINEL", *command)  # type: ignore[no-untyped-call]
        finally:
            client.close()

    def _knows(self, watcher: Node, replicas: int) -> bool:
        """Whether a Sentinel knows every other Sentinel and every live replica (it learns of them in seconds)."""
        reply = self._ask(watcher, "MASTER", PRIMARY_NAME)
        facts = dict(zip(reply[::2], reply[1::2], strict=True))
        others = int(facts.get("num-other-sentinels", -1)) == len(self.watchers) - 1
        listed = self._ask(watcher, "REPLICAS", PRIMARY_NAME)
        flags = [dict(zip(entry[::2], entry[1::2], strict=True)).get("flags", "") for entry in listed]
        return others and sum(1 for flag in flags if "down" not in flag and "disconnected" not in flag) >= replicas

    def primary(self) -> Node:
        """The node the Sentinels name primary now (asked of the first that answers)."""
        for watcher in self.watchers:
            with contextlib.suppress(redis.RedisError):
                host_port = self._ask(watcher, "GET-MASTER-ADDR-BY-NAME", PRIMARY_NAME)
                if host_port:
                    return next(node for node in self.data if node.port == int(host_port[1]))
        raise RuntimeError("no Sentinel names a primary")

    def role(self, node: Node) -> str | None:
        """What `node` says it is now (master or slave), None when it does not answer."""
        client = self._data_client(node)
        try:
            return str(client.info("replication").get("role"))  # type: ignore[union-attr]
        except redis.RedisError:
            return None
        finally:
            client.close()

    def wait_settled(self, timeout_s: float = SETTLE_CEILING_S) -> Node:
        """Wait until the Sentinels agree on a primary that answers as one, with every live replica in sync and
        every Sentinel knowing every other; return the primary."""
        deadline = time.monotonic() + timeout_s
        live = [node for node in self.data if node.process is not None and node.process.poll() is None]
        while True:
            with contextlib.suppress(redis.RedisError, RuntimeError, StopIteration):
                primary = self.primary()
                client = self._data_client(primary)
                info: dict[str, Any] = client.info("replication")  # type: ignore[assignment]
                client.close()
                synced = sum(  # `slaveN` entries are the replicas; a replica's own `slave_*` fields are numbers
                    1
                    for key, value in info.items()
                    if key.startswith("slave") and isinstance(value, dict) and value.get("state") == "online"
                )
                known = all(self._knows(watcher, len(live) - 1) for watcher in self.watchers)
                if info.get("role") == "master" and synced == len(live) - 1 and known:
                    return primary
            if time.monotonic() > deadline:
                raise RuntimeError(f"the replicated store did not settle within {timeout_s:g} s")
            time.sleep(0.1)

    def kill(self, node: Node) -> None:
        if node.process is not None:
            node.process.send_signal(signal.SIGKILL)
            node.process.wait(10)
            node.process = None

    def failover(self) -> None:
        """A manual failover (SENTINEL FAILOVER), the old primary still reachable by everyone."""
        self._ask(self.watchers[0], "FAILOVER", PRIMARY_NAME)

    def cut_off(self, node: Node) -> None:
        """Drop what the replicas and Sentinels send `node`'s port, so they see it gone while clients still reach it
        (undone by `heal`)."""
        if not self.as_nobody or shutil.which("iptables") is None:
            raise RuntimeError("cutting a primary off needs root, setpriv and iptables")
        rule = ["OUTPUT", "-p", "tcp", "-d", "127.0.0.1", "--dport", str(node.port)]
        rule += ["-m", "owner", "--uid-owner", str(NOBODY), "-j", "DROP"]
        subprocess.run(["iptables", "-I", *rule], check=True, capture_output=True)
        self._cuts.append(rule)

    def heal(self) -> None:
        for rule in self._cuts:
            subprocess.run(["iptables", "-D", *rule], check=False, capture_output=True)
        self._cuts.clear()

    def restart(self, node: Node) -> None:
        """Start a killed node again as a replica of whoever is primary now (Sentinel would point it there too)."""
        primary = self.primary()
        node.process = self._spawn(self._data_command(node, primary), node.folder)

    def stop(self) -> None:
        self.heal()
        for node in [*self.watchers, *self.data]:
            self.kill(node)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> ReplicatedStore:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()
