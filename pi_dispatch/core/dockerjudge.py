"""What the worker's Docker socket proxy lets through (`infra/dockerproxy.py`), judged on what Docker will read.

A request is allowed by its method and its path (the calls a worker makes, nothing else). A container create is
judged on its parsed JSON as the daemon reads it: Go's decoder matches a key case-insensitively (with Unicode's
simple folding: U+017F, the long s, reads as `s`), after `\\u` escapes are decoded, so keys are compared folded,
and two keys that fold alike are refused (which one Docker keeps is not ours to guess). Every host setting is named
with its judge; one the worker never sends is refused unless it is empty. Anything that cannot be judged (a body
that is not a JSON object, a bind source that cannot be resolved) is refused: the answer is a reason, never a guess.
Pure: resolving a path on the host is handed in.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import unquote

MAX_CREATE_BYTES: Final = 1024 * 1024  # a worker's create is a few KiB: a larger body is refused before it is read
_VERSION: Final = r"(?:/v[0-9]{1,2}\.[0-9]{1,3})?"
_ID: Final = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}"
_IMAGE: Final = r"[A-Za-z0-9][A-Za-z0-9_.:/@+-]{0,254}"
# (methods, path) of every call a worker makes: ping and version, list, create, control, read and remove its
# containers, inspect an image, inspect a network. Image names are matched decoded (a digest's `@` comes encoded).
ALLOWED: Final = tuple(
    (frozenset(methods), re.compile(f"{_VERSION}{path}"))
    for methods, path in (
        (("GET", "HEAD"), r"/(?:_ping|version)"),
        (("GET",), r"/containers/json"),
        (("POST",), r"/containers/create"),
        (("POST",), f"/containers/{_ID}/(?:start|attach|wait|stop|kill)"),
        (("GET",), f"/containers/{_ID}/(?:json|logs)"),
        (("DELETE",), f"/containers/{_ID}"),
        (("GET",), f"/images/{_IMAGE}/json"),
        (("GET",), f"/networks/{_ID}"),
    )
)
CREATE: Final = re.compile(f"{_VERSION}/containers/create")
START: Final = re.compile(f"{_VERSION}/containers/({_ID})/start")
# The one call whose connection may carry more than its request: an attach, once the daemon has upgraded it.
ATTACH: Final = re.compile(f"{_VERSION}/containers/{_ID}/attach")
# Namespaces a container may never share with the host or another container.
NAMESPACE_MODES: Final = ("pidmode", "ipcmode", "utsmode", "usernsmode", "cgroupnsmode")
SECURITY_OPTS: Final = frozenset({"no-new-privileges", "no-new-privileges:true", "no-new-privileges=true"})
LOG_DRIVERS: Final = frozenset({"none", "json-file", "local"})
SYSCTL: Final = re.compile(r"net\.ipv6\.conf\.[a-z0-9]+\.disable_ipv6")


class Refused(ValueError):
    """Why the proxy answers 403: a reason that names a field, never a value from the body."""


def allowed(method: str, raw_path: str) -> bool:
    """Whether a call is one a worker makes. The path is the request's, before its query; an encoded character
    is read decoded, once (and a path that decodes to `..` or a `/` it did not have is not a worker's)."""
    decoded = unquote(raw_path)
    if ".." in decoded.split("/") or decoded.count("/") != raw_path.count("/") or "%" in decoded:
        return False
    return any(method in methods and pattern.fullmatch(decoded) for methods, pattern in ALLOWED)


def _folded_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's members by their folded key; two keys that fold alike refuse the body."""
    found: dict[str, Any] = {}
    for key, value in pairs:
        folded = key.casefold()
        if folded in found:
            raise Refused(f"two keys read as {folded!r}: Docker would keep one of them")
        found[folded] = value
    return found


def parse_create(body: bytes) -> dict[str, Any]:
    """A create's body as Docker reads it, its keys folded. Raises Refused."""
    try:
        parsed = json.loads(body, object_pairs_hook=_folded_pairs)
    except (ValueError, RecursionError) as error:
        raise Refused(str(error) if isinstance(error, Refused) else "the body is not JSON") from None
    if not isinstance(parsed, dict):
        raise Refused("the body is not a JSON object")
    return parsed


def _empty(value: object) -> bool:
    return value is None or value is False or value in (0, "", [], {})


def _strings(value: object, field: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise Refused(f"HostConfig.{field} is not a list of strings")
    return value


def _binds(value: object, jobs_dir: str, resolve: Callable[[str], str | None]) -> None:
    binds = _strings(value, "Binds")
    folder = resolve(jobs_dir) if binds else jobs_dir  # resolved when asked: the worker may make it after we start
    if folder is None:
        raise Refused("the jobs folder is not there to bind from")
    jobs_dir = folder
    for bind in binds:
        source = bind.split(":", 1)[0]
        if not source.startswith("/") or ".." in source.split("/"):
            raise Refused("a bind's source is not an absolute path under the jobs folder")
        real = resolve(source)
        if real is None:
            raise Refused("a bind's source cannot be resolved here")
        if real != jobs_dir and not real.startswith(jobs_dir.rstrip("/") + "/"):
            raise Refused("a bind's source is outside the jobs folder (its links followed)")


def _network_mode(value: object) -> None:
    if value is None:
        return
    if not isinstance(value, str) or value.casefold() == "host" or ":" in value:
        raise Refused("HostConfig.NetworkMode shares another namespace")


def _security(value: object) -> None:
    if any(option.casefold() not in SECURITY_OPTS for option in _strings(value, "SecurityOpt")):
        raise Refused("HostConfig.SecurityOpt holds more than no-new-privileges (seccomp, apparmor, labels)")


def _log(value: object) -> None:
    if value is None:
        return
    kind = value.get("type") if isinstance(value, dict) else ...
    if kind is not None and kind not in LOG_DRIVERS:
        raise Refused("HostConfig.LogConfig names a driver that ships output off this host")


def _sysctls(value: object) -> None:
    if value is None:
        return
    if not isinstance(value, dict) or not all(SYSCTL.fullmatch(k) and v == "1" for k, v in value.items()):
        raise Refused("HostConfig.Sysctls sets more than IPv6 off")


def _falsy(field: str) -> Callable[[object], None]:
    def judge(value: object) -> None:
        if not _empty(value):
            raise Refused(f"HostConfig.{field} is set")

    return judge


def _accepted(_value: object) -> None:
    """Limits and plain switches: any value only narrows the container."""


@dataclass(frozen=True)
class CreateJudge:
    """The create judge for one host: its jobs folder (an absolute path, its links followed when a bind is judged),
    and how a path is resolved on the host."""

    jobs_dir: str
    resolve: Callable[[str], str | None]

    def judges(self) -> Mapping[str, Callable[[object], None]]:
        """Each host setting a worker sends, folded, with its judge; the ones it never sends must be empty."""
        named: dict[str, Callable[[object], None]] = {
            "binds": lambda value: _binds(value, self.jobs_dir, self.resolve),
            "networkmode": _network_mode,
            "securityopt": _security,
            "logconfig": _log,
            "sysctls": _sysctls,
            "privileged": _falsy("Privileged"),
        }
        for plain in (
            "memory",
            "nanocpus",
            "pidslimit",
            "readonlyrootfs",
            "capdrop",
            "dns",
            "tmpfs",
            "init",
            "runtime",
            "autoremove",
        ):
            named[plain] = _accepted
        return named

    def judge(self, body: bytes) -> dict[str, Any]:
        """The parsed create, when a worker may make it. Raises Refused naming the field."""
        create = parse_create(body)
        if not _empty(create.get("networkingconfig")):
            raise Refused("NetworkingConfig is set: a job joins its one network through HostConfig")
        host = create.get("hostconfig")
        if host is None:
            return create
        if not isinstance(host, dict):
            raise Refused("HostConfig is not an object")
        judges = self.judges()
        for key, value in host.items():
            judge = judges.get(key)
            if judge is not None:
                judge(value)
            elif key in NAMESPACE_MODES:
                if not _empty(value):
                    raise Refused(f"HostConfig.{key} shares a namespace")
            elif not _empty(value):
                raise Refused(f"HostConfig.{key} is not a setting a worker makes")
        return create

    def judge_mounts(self, inspected: Mapping[str, Any]) -> None:
        """A created container's binds as Docker holds them, judged again at its start (a link swapped since)."""
        host = inspected.get("HostConfig")
        _binds(host.get("Binds") if isinstance(host, Mapping) else None, self.jobs_dir, self.resolve)
