"""`pi-dispatch init --egress-allowlist`: a starter allowlist the egress proxy reads, never written over."""

from __future__ import annotations

from pathlib import Path

from pi_dispatch.worker.host.egressproxy import read_allowlist
from tests.support.helpers import run_cli


def test_init_writes_a_starter_allowlist_the_proxy_reads_and_never_overwrites(tmp_path: Path) -> None:
    triggers, allowlist = tmp_path / "triggers.json", tmp_path / "egress-allowlist.conf"
    written = run_cli("init", "--triggers", str(triggers), "--egress-allowlist", str(allowlist))
    assert written.returncode == 0, written.stdout + written.stderr
    listed = read_allowlist(allowlist)
    assert listed.allows("api.anthropic.com", 443) and listed.allows("raw.githubusercontent.com", 443)
    assert not listed.allows("paste.example", 443)
    allowlist.write_text("# mine\napi.example.com\n")
    again = run_cli("init", "--triggers", str(tmp_path / "other.json"), "--egress-allowlist", str(allowlist))
    assert again.returncode == 1 and "left as it is" in again.stdout
    assert allowlist.read_text() == "# mine\napi.example.com\n" and (tmp_path / "other.json").exists()
