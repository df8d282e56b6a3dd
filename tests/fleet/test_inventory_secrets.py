"""The inventory's secrets, read as ansible-playbook reads them: Ansible's lookups (the example's store password and
webhook secret are made on the controller by the `password` lookup) and vaulted values, decrypted with the vault
password Ansible's configuration names. Real ansible-core, real files, the real CLI in a child process."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

from pi_dispatch.config.hostvars import PREFIX
from pi_dispatch.fleet.inventory import load_fleet, load_inventory
from tests.support.helpers import run_cli_process

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "inventory.example"
RECEIVER_SECRET = "pi_dispatch_receiver_webhook_secret"


def _copy_of_the_example(tmp_path: Path) -> Path:
    folder = tmp_path / "fleet"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns(".credentials"))
    return folder


def _as_ansible_reads(folder: Path, host: str, variable: str) -> str:
    """A variable as Ansible itself templates it for one host (the loader keeps only the workers' variables; the
    receivers' and the controller's own plays, on an implicit localhost, read the same group_vars)."""
    listed = subprocess.run(
        [Path(sys.executable).parent / "ansible", host, "-i", folder / "hosts.yml", "-m", "debug", "-a",
         f"var={variable}"],
        capture_output=True, text=True, check=True, cwd=folder,
    )  # fmt: skip
    return listed.stdout.split(f'"{variable}": "')[1].split('"')[0]


def test_the_example_makes_its_secrets_once_on_the_controller_private_and_never_as_inventory(tmp_path: Path) -> None:
    folder = _copy_of_the_example(tmp_path)
    first = {host.name: host.vars[PREFIX + "valkey_password"] for host in load_inventory(folder / "hosts.yml")}
    credentials = folder / ".credentials"
    made = (credentials / "valkey-worker-password").read_text().strip()  # the workers' own store user's
    assert set(first.values()) == {made} and len(made) == 32 and made.isalnum()
    assert stat.S_IMODE(credentials.stat().st_mode) == 0o700
    assert stat.S_IMODE((credentials / "valkey-worker-password").stat().st_mode) == 0o600
    # read again, through the folder this time, by the CLI in another process: the same value, nothing new made
    again = {host.name: host.vars[PREFIX + "valkey_password"] for host in load_fleet(folder)[0]}
    rendered = run_cli_process("config", "render", "--host", "mini2", "-i", str(folder))
    assert again == first and rendered.returncode == 0 and f"VALKEY_PASSWORD={made}\n" in rendered.stdout
    # the receiver's secret comes from the same folder, and ansible-playbook's own reading agrees with ours
    webhook = (credentials / "github-webhook-secret").read_text().strip()
    assert len(webhook) == 40 and _as_ansible_reads(folder, "receiver", RECEIVER_SECRET) == webhook
    # a play on the controller (localhost is in no inventory file, so it has no inventory_dir) finds the same folder
    stores = _as_ansible_reads(folder, "localhost", "pi_dispatch_valkey_password")
    assert stores == (credentials / "valkey-password").read_text().strip() and stores != made  # the operator's own
    # never committed: no file the example ships holds either, and Ansible reads no credential as a host
    files = [path for path in EXAMPLE.resolve().rglob("*") if path.is_file() and ".credentials" not in path.parts]
    shipped = "".join(path.read_text() for path in files)
    assert made not in shipped and webhook not in shipped and stores not in shipped
    listed = subprocess.run(
        [Path(sys.executable).parent / "ansible-inventory", "-i", folder, "--list"],
        capture_output=True, text=True, check=True, cwd=folder,
    )  # fmt: skip
    hosts = set(json.loads(listed.stdout)["_meta"]["hostvars"])
    assert hosts == {"store", "mini1", "mini2", "mini3", "receiver"} and made not in listed.stdout
    assert "WARNING" not in listed.stderr


def test_a_second_copy_of_the_example_gets_passwords_of_its_own(tmp_path: Path) -> None:
    one, two = _copy_of_the_example(tmp_path / "a"), _copy_of_the_example(tmp_path / "b")
    password = {load_inventory(folder)[0].vars[PREFIX + "valkey_password"] for folder in (one, two)}
    assert len(password) == 2


def _vaulted_inventory(tmp_path: Path, vault_password: Path) -> Path:
    folder = tmp_path / "vaulted"
    (folder / "group_vars").mkdir(parents=True)
    (folder / "hosts.yml").write_text("all:\n  children:\n    pi_dispatch_workers:\n      hosts:\n        w1:\n")
    encrypted = subprocess.run(
        [Path(sys.executable).parent / "ansible-vault", "encrypt_string", "--vault-password-file", vault_password,
         "--name", PREFIX + "valkey_password", "vaulted-store-password-1234"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    (folder / "group_vars" / "pi_dispatch_workers.yml").write_text(encrypted.stdout)
    return folder


def test_a_vaulted_password_is_decrypted_with_ansibles_vault_password_file_and_refused_without(
    tmp_path: Path,
) -> None:
    vault_password = tmp_path / "vault-pass"
    vault_password.write_text("the vault's own password\n")
    folder = _vaulted_inventory(tmp_path, vault_password)
    environment = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_VAULT")}

    def render(**extra: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "pi_dispatch", "config", "render", "--host", "w1", "-i", str(folder)]
        env = environment | extra | {"COLUMNS": "200"}
        return subprocess.run(argv, capture_output=True, text=True, env=env, check=False, timeout=120)

    decrypted = render(ANSIBLE_VAULT_PASSWORD_FILE=str(vault_password))
    assert decrypted.returncode == 0, decrypted.stderr
    assert "VALKEY_PASSWORD=vaulted-store-password-1234\n" in decrypted.stdout
    refused = render()
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "cannot be decrypted" in refused.stderr and "ANSIBLE_VAULT_PASSWORD_FILE" in refused.stderr
    assert "vaulted-store-password" not in refused.stderr + refused.stdout
