"""Egress per profile, beyond the reference: a secret or wait profile may have an allowlist of its own
(`PI_EGRESS_PROFILES`, name:/path/to/allowlist), which its jobs reach instead of the host's; a profile whose list
lists nothing is offline (its jobs get no network at all, so neither the proxy nor a resolver is there to ask).

Each distinct list is one egress network, named after the list's content, so the proxy and the worker (which read
the same files) name it alike, and a changed list is a new network the proxy must make: the worker's gate finds
it missing until the proxy has been restarted. The host decides from the profiles a job binds, never from the job:
a job binding profiles whose lists differ is refused before any spend (`egress-profiles-differ`). A bound profile
with no list of its own takes the list of the one that has one; with none, the host's own list. Pure.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from pi_dispatch.core.egress import Allowlist

OFFLINE_NETWORK: Final = "none"  # Docker's: a container with a loopback and nothing else
NETWORK_PREFIX: Final = "pi-egress-"
BRIDGE_PREFIX: Final = "pi-eg-"  # with the 8-character digest: 14, under the kernel's 15 for an interface name


def list_digest(allowlist: Allowlist) -> str:
    """Eight hex characters naming a list by what it allows, whatever its order, comments or duplicates."""
    canonical = "\n".join(sorted(f"{d.written}:{d.port}" for d in allowlist.destinations))
    return hashlib.sha256(canonical.encode()).hexdigest()[:8]


@dataclass(frozen=True)
class EgressNetwork:
    """One egress network: its Docker name, its bridge's name and the list its proxy listener enforces."""

    name: str
    bridge: str
    allowlist: Allowlist

    @classmethod
    def of(cls, allowlist: Allowlist) -> EgressNetwork:
        digest = list_digest(allowlist)
        return cls(NETWORK_PREFIX + digest, BRIDGE_PREFIX + digest, allowlist)


@dataclass(frozen=True)
class ProfilesDiffer:
    """A job binds profiles whose egress differs: their names, as the refusal names them."""

    profiles: tuple[str, ...]


@dataclass(frozen=True)
class EgressPlan:
    """A host's egress: its jobs' own network (None: the daemon's default), and each profile's own list (an empty
    one: offline)."""

    default_network: str | None
    lists: Mapping[str, Allowlist] = field(default_factory=dict)

    def networks(self) -> tuple[EgressNetwork, ...]:
        """The profile networks the proxy serves besides the host's own, one per distinct non-empty list."""
        found: dict[str, EgressNetwork] = {}
        for allowlist in self.lists.values():
            if allowlist.destinations:
                network = EgressNetwork.of(allowlist)
                found.setdefault(network.name, network)
        return tuple(found.values())

    def network_names(self) -> tuple[str, ...]:
        """Every network the host's jobs may join with the proxy as their way out: its own first."""
        own = () if self.default_network in (None, OFFLINE_NETWORK) else (str(self.default_network),)
        return (*own, *(network.name for network in self.networks()))

    def network_for(self, profiles: Iterable[str]) -> str | ProfilesDiffer | None:
        """The network a job binding `profiles` joins (OFFLINE_NETWORK for none), or what refuses it."""
        chosen = {name: self.lists[name] for name in sorted(set(profiles)) if name in self.lists}
        if not chosen:
            return self.default_network
        distinct = {list_digest(allowlist) if allowlist.destinations else "" for allowlist in chosen.values()}
        if len(distinct) > 1:
            return ProfilesDiffer(tuple(chosen))
        allowlist = next(iter(chosen.values()))
        return EgressNetwork.of(allowlist).name if allowlist.destinations else OFFLINE_NETWORK
