"""What a worker gives a job's agent, declared once as the other settings are (`worker_settings.py` builds on these):
the contract its container gets, the provider, model and turns a job runs on unless it names its own, the folder of
pi extensions every job sees, the CA its forge calls trust; and the credentials it reads by name from its place (a
provider's key under pi's own variable, the PAT under the variable GITHUB_PAT_VAR names)."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import PrivateAttr

from pi_dispatch.config.declaration import DeclaredSettings, setting
from pi_dispatch.config.handover import Secret
from pi_dispatch.config.kinds import HostFile, JobContract, ModelId, ProviderId, Whole, WholeMs


class AgentSettings(DeclaredSettings):
    """The agent's defaults and the forges' reach."""

    job_contract: JobContract = setting(
        "PI_JOB_CONTRACT",
        "reference",
        "What a job's container is given. reference: what the reference's pi-job image reads (a token scoped to the "
        "job's repository, a hardened clone at the default branch in /workspace, /job/prompt.md and event.json, pi's "
        "variables), as a Node host gives it. event: only /job/event.json (the trigger as it came) and job.json, for "
        "an image that clones nothing and runs no agent (the example image, build steps).",
        "reference, or event for an image that needs no workspace",
    )
    provider: ProviderId = setting(
        "PI_PROVIDER",
        "anthropic",
        "The pi provider a job runs on unless it names its own; its key is read from this host's environment under "
        "pi's own variable names (ANTHROPIC_API_KEY, OPENAI_API_KEY, ...).",
        "a pi provider id such as anthropic or openai",
    )
    model: ModelId = setting(
        "PI_MODEL",
        "",
        "The model a job runs on unless it names its own. Empty: a job must name its model.",
        "a model id such as claude-sonnet-4-5, or empty",
    )
    max_turns: Whole = setting(
        "PI_MAX_TURNS",
        30,
        "The agent's turn budget for a job that names none.",
        "a whole number of turns from 1 to 10000",
        ge=1,
        le=10_000,
    )
    global_pi_dir: HostFile = setting(  # a folder; HostFile is the nullable absolute path
        "PI_GLOBAL_PI_DIR",
        None,
        "A folder of pi extensions, packages and settings every job sees read-only at /opt/pi-global. Empty: none.",
        "an absolute path such as /etc/pi-dispatch/pi-global, or empty",
    )
    ssl_cert_file: HostFile = setting(
        "SSL_CERT_FILE",
        None,
        "A CA bundle the worker trusts for its forge calls and clones (a GitHub Enterprise Server or a forge behind a "
        "private CA). Empty: the system's.",
        "an absolute path to a PEM bundle such as /etc/pi-dispatch/forge-ca.pem, or empty",
    )
    on_failure: HostFile = setting(
        "PI_ON_FAILURE",
        None,
        "A command run when a job finally fails or its runner stops it: `<command> <jobId> <outcome> <reason> <host>`, "
        "no shell, the worker's environment (the reference's failure hook). Empty: none.",
        "an absolute path to an executable, or empty",
    )
    on_failure_timeout_ms: WholeMs = setting(
        "PI_ON_FAILURE_TIMEOUT_MS",
        10_000,
        "How long the failure hook may run before SIGTERM (SIGKILL 2 s later).",
        "a whole number of milliseconds from 100 to 600000",
        ge=100,
        le=600_000,
    )
    _credentials: dict[str, Secret] = PrivateAttr(default_factory=dict)

    @property
    def credentials(self) -> Mapping[str, Secret]:
        """The variables of its place the worker reads by name, not as settings: a provider's key, the PAT."""
        return dict(self._credentials)
