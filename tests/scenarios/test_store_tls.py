"""TLS to the store end to end (issue 53): redis-server speaking only TLS with a certificate of a private CA, a
real worker and the CLI on `rediss://`, trusting that CA through SSL_CERT_FILE (what the example's hosts set), a
forge job enqueued, run in a container and read back; and a client that does not trust the CA is refused."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pi_dispatch.testing.jobs import forge_job
from tests.support.egress import free_port
from tests.support.helpers import run_cli_process
from tests.support.workers import start_worker_process, worker_env

pytestmark = [pytest.mark.redis, pytest.mark.docker]
PASSWORD = "tls-store-password"
CEILING_S = 60.0


def private_ca(folder: Path) -> tuple[Path, Path, Path]:
    """A CA, and a certificate it signed for 127.0.0.1: (ca.pem, cert.pem, key.pem)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)

    def named(name: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(named("pi-dispatch test CA"))
        .issuer_name(named("pi-dispatch test CA"))
        .public_key(ca_key.public_key())
        .serial_number(1)
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    served = (
        x509.CertificateBuilder()
        .subject_name(named("store"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(2)
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = folder / "ca.pem", folder / "cert.pem", folder / "key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(served.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return paths


@pytest.fixture
def tls_store(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """redis-server on TLS alone (no plain port), its password set: its rediss:// URL and the CA to trust."""
    ca, cert, key = private_ca(tmp_path)
    port = free_port()
    binary = shutil.which("redis-server")
    assert binary is not None
    server = subprocess.Popen(
        [binary, "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1", "--tls-cert-file", str(cert),
         "--tls-key-file", str(key), "--tls-ca-cert-file", str(ca), "--tls-auth-clients", "no",
         "--requirepass", PASSWORD, "--save", "", "--dir", str(tmp_path), "--maxmemory-policy", "noeviction"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        import socket

        deadline = time.monotonic() + CEILING_S
        while True:
            assert server.poll() is None, "redis-server would not start with TLS"
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.monotonic() < deadline, "redis-server never listened"
            time.sleep(0.05)
        yield f"rediss://127.0.0.1:{port}/0", ca
    finally:
        server.terminate()
        server.wait(CEILING_S)


async def test_a_fleet_on_rediss_runs_a_job_and_refuses_a_store_it_cannot_verify(
    tls_store: tuple[str, Path], tmp_path: Path, job_image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, ca = tls_store
    trusted = {"VALKEY_PASSWORD": PASSWORD, "SSL_CERT_FILE": str(ca)}
    env = worker_env(tmp_path, url, job_image, "tls1", **trusted)
    log = tmp_path / "worker.log"
    worker = start_worker_process(env, log)
    try:
        job = tmp_path / "job.json"
        job.write_text(json.dumps(forge_job(7)))
        cli = {"VALKEY_URL": url, **trusted}
        added = await asyncio.to_thread(run_cli_process, "enqueue", "--job", str(job), "--json", env=cli)
        assert added.returncode == 0, added.stdout + added.stderr
        job_id = json.loads(added.stdout)["job_id"]
        deadline = time.monotonic() + CEILING_S
        while True:
            said = await asyncio.to_thread(run_cli_process, "job", job_id, "--json", env=cli)
            state: Any = json.loads(said.stdout) if said.returncode == 0 else {}
            if state.get("state") == "completed":
                break
            assert time.monotonic() < deadline, f"the job did not complete over TLS: {said.stdout}{said.stderr}"
            await asyncio.sleep(0.5)
        refused = await asyncio.to_thread(
            run_cli_process, "job", job_id, "--json", env={"VALKEY_URL": url, "VALKEY_PASSWORD": PASSWORD}
        )
        assert refused.returncode != 0 and "Traceback" not in refused.stderr  # an unknown CA: never connected
        plain = await asyncio.to_thread(
            run_cli_process, "job", job_id, env={**cli, "VALKEY_URL": url.replace("rediss", "redis")}
        )
        assert plain.returncode != 0  # the store speaks TLS only
    finally:
        worker.terminate()
        worker.wait(CEILING_S)
