"""A host's egress plan as the worker and the proxy read it at boot: each profile's list from PI_EGRESS_PROFILES'
files, refused as a config error naming the variable and the profile."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pi_dispatch.config.worker_settings import WorkerSettings, load_settings
from pi_dispatch.core.errors import ConfigError
from pi_dispatch.worker.host.egressproxy import egress_plan


def _settings(**env: Any) -> WorkerSettings:
    return load_settings(environment=lambda: {"PI_WORKER_NAME": "mini1", **env})


def test_profile_lists_are_read_at_boot_and_a_list_no_proxy_enforces_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "deploy.conf").write_text("api.example.com\n")
    (tmp_path / "sealed.conf").write_text("")
    both = f"deploy:{tmp_path}/deploy.conf,sealed:{tmp_path}/sealed.conf"
    on = egress_plan(_settings(PI_EGRESS_PROFILES=both))
    assert set(on.lists) == {"deploy", "sealed"} and len(on.networks()) == 1
    with pytest.raises(ConfigError) as off:
        egress_plan(_settings(PI_EGRESS="0", PI_EGRESS_PROFILES=both))
    [problem] = off.value.problems
    assert problem.subject == "PI_EGRESS_PROFILES" and "deploy" in problem.message and "offline" in problem.fix
    assert egress_plan(_settings(PI_EGRESS="0", PI_EGRESS_PROFILES=f"sealed:{tmp_path}/sealed.conf")).lists
    with pytest.raises(ConfigError) as unread:
        egress_plan(_settings(PI_EGRESS_PROFILES=f"gone:{tmp_path}/gone.conf"))
    assert unread.value.problems[0].subject == "PI_EGRESS_PROFILES entry 'gone'", unread.value.problems
    (tmp_path / "bad.conf").write_text("*.example.com\n")
    with pytest.raises(ConfigError, match="wildcard"):
        egress_plan(_settings(PI_EGRESS_PROFILES=f"bad:{tmp_path}/bad.conf"))


def test_config_check_refuses_a_bad_profile_list_and_warns_of_a_public_suffix_wildcard(tmp_path: Path) -> None:
    import json

    from tests.support.helpers import run_cli

    env_file = tmp_path / "worker.env"
    (tmp_path / "egress-allowlist.conf").write_text("api.example.com\n.co.uk\n")
    (tmp_path / "pages.conf").write_text(".github.io\n")
    env_file.write_text(f"PI_WORKER_NAME=mini1\nPI_EGRESS_PROFILES=pages:{tmp_path}/pages.conf\n")
    checked = run_cli("config", "check", "--env-file", str(env_file))
    assert checked.returncode == 0 and "OK" in checked.stdout, checked.stderr
    warned = [line for line in checked.stderr.splitlines() if line.startswith("warning:")]
    assert len(warned) == 2 and "PI_EGRESS_PROFILES entry 'pages': .github.io covers a public suffix" in warned[0]
    assert "PI_EGRESS_ALLOWLIST_FILE: .co.uk" in warned[1], warned
    shown = json.loads(run_cli("config", "check", "--json", "--env-file", str(env_file)).stdout)
    assert len(shown["warnings"]) == 2
    (tmp_path / "pages.conf").write_text("*.github.io\n")
    refused = run_cli("config", "check", "--env-file", str(env_file))
    assert refused.returncode == 2 and "wildcard" in refused.stderr and "Traceback" not in refused.stderr
