"""The one Docker connect: a client that answered, or why none did, naming no path."""

from __future__ import annotations

from pathlib import Path

import pytest

from pi_dispatch.infra.dockerclient import DockerUnreachable, docker_client


def test_no_daemon_is_named_by_the_errors_type_never_its_socket(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    socket = tmp_path / "nobody-listens.sock"
    monkeypatch.setenv("DOCKER_HOST", f"unix://{socket}")
    with pytest.raises(DockerUnreachable) as raised:
        docker_client(timeout_s=2)
    assert "not reachable" in str(raised.value) and str(tmp_path) not in str(raised.value)


@pytest.mark.docker
def test_a_daemon_that_answers_gives_a_client(docker_client: object) -> None:
    from pi_dispatch.infra import dockerclient

    client = dockerclient.docker_client(timeout_s=10)
    try:
        assert client.ping() is True
    finally:
        client.close()
