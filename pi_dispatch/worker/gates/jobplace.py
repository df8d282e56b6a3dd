"""Where a job runs on this host, decided by the host from the profiles the job binds (its secret profile, `default`
when its secrets name none, and its wait profiles), never from anything else it says: the network it joins
(`core/egressprofiles.py`), the runtime it runs under (`core/runtimes.py`), and what this host serves at all once
its runtimes have been tried (a profile whose runtime failed is neither advertised nor run)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pi_dispatch.core.capabilities import capability_tokens, job_needs
from pi_dispatch.core.egressprofiles import EgressPlan, ProfilesDiffer
from pi_dispatch.core.names import IMAGE_REFERENCE_RE
from pi_dispatch.core.reasons import Reason
from pi_dispatch.core.runtimes import RuntimeChoice
from pi_dispatch.worker.gates.scripts import Refusal
from pi_dispatch.worker.gates.secrets import SecretsGate


@dataclass
class JobPlace:
    """This host's rules for where a job runs."""

    secrets: SecretsGate
    secret_profiles: Mapping[str, str]
    wait_profiles: Mapping[str, str]
    plan: EgressPlan
    runtimes: RuntimeChoice = field(default_factory=RuntimeChoice)

    @property
    def capabilities(self) -> frozenset[str]:
        """The tokens this host serves: its profiles, less those whose runtime failed its canary."""
        unserved = self.runtimes.unserved()
        served = {name: path for name, path in self.secret_profiles.items() if name not in unserved}
        waited = {name: path for name, path in self.wait_profiles.items() if name not in unserved}
        return frozenset(capability_tokens(served, waited))

    def bound(self, data: Mapping[str, Any]) -> set[str]:
        bound = {need.partition(":")[2] for need in job_needs(data)}
        if (secret := self.secrets.bound_profile(data)) is not None:
            bound.add(secret)
        return bound

    def runtime(self, bound: set[str]) -> str | Refusal | None:
        """The runtime a job binding these profiles runs under (None: Docker's default); one that failed its canary
        here refuses it."""
        runtime = self.runtimes.for_profiles(bound)
        if not self.runtimes.usable(runtime):
            profiles = ",".join(sorted(bound & self.runtimes.unserved()))
            return Refusal(Reason.JOB_RUNTIME_UNAVAILABLE, profiles or None)
        return runtime

    def network(self, bound: set[str]) -> str | Refusal | None:
        """The network a job binding these profiles joins (None: Docker's default; `none`: offline); profiles whose
        egress differs refuse it."""
        network = self.plan.network_for(bound)
        if isinstance(network, ProfilesDiffer):
            return Refusal(Reason.EGRESS_PROFILES_DIFFER, ",".join(network.profiles))
        return network

    def decide(self, data: Mapping[str, Any]) -> Refusal | tuple[str | None, str | None]:
        """The job's network and runtime here, or what refuses it before any spend."""
        bound = self.bound(data)
        network = self.network(bound)
        if isinstance(network, Refusal):
            return network
        runtime = self.runtime(bound)
        return runtime if isinstance(runtime, Refusal) else (network, runtime)


def job_image(host_image: str, allowed: tuple[str, ...], data: Mapping[str, Any]) -> str | Refusal | None:
    """The job's image: its own when this host allows it (PI_ALLOWED_IMAGES), the host's when it names none; an
    image the host does not allow is refused; None for one that is not an image reference at all."""
    requested = data.get("image")
    image = host_image if requested is None else requested
    if not isinstance(image, str) or not IMAGE_REFERENCE_RE.fullmatch(image):
        return None
    if image != host_image and image not in allowed:
        return Refusal(Reason.JOB_IMAGE_NOT_ALLOWED)
    return image
