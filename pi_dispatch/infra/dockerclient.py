"""The one way the package reaches a Docker daemon: a client on DOCKER_HOST (the local socket by default) that has
answered, or why none did (by the error's type, never a path)."""

from __future__ import annotations

from typing import Any


class DockerUnreachable(Exception):
    """No Docker daemon answered."""


def docker_client(timeout_s: int | None = None) -> Any:
    """A Docker SDK client that answered a ping (its calls time out after `timeout_s`, the SDK's own by default).
    Raises DockerUnreachable."""
    import docker
    import requests.exceptions

    client = None
    try:
        client = docker.from_env() if timeout_s is None else docker.from_env(timeout=timeout_s)
        client.ping()
    except (docker.errors.DockerException, requests.exceptions.RequestException) as error:
        if client is not None:
            client.close()
        raise DockerUnreachable(f"the Docker daemon is not reachable ({type(error).__name__})") from error
    return client


def security_options(client: Any) -> frozenset[str]:
    """The daemon's security options (`name=rootless`, `name=userns`, ...), from `docker info`; none when it does
    not answer (the job's start will say)."""
    import docker
    import requests.exceptions

    try:
        options = client.info().get("SecurityOptions")
    except (docker.errors.DockerException, requests.exceptions.RequestException, AttributeError):
        return frozenset()
    return frozenset(str(option) for option in options) if isinstance(options, list) else frozenset()
