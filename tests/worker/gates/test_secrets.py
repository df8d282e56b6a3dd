"""Secret resolvers and wait checks run for real (contracts §2.1, §2.2; upstream-vectors §6.5)."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from pi_dispatch.core.waits import WaitDecision
from pi_dispatch.worker.gates.scripts import InfraRetry, Refusal, run_wait_check, script_environment, usable_script
from pi_dispatch.worker.gates.secrets import SecretsGate, resolve_reference


def script(tmp_path: Path, name: str, body: str, mode: int = 0o755) -> Path:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(mode)
    return path


async def test_value_has_one_trailing_newline_stripped(tmp_path: Path) -> None:
    resolver = script(tmp_path, "r", 'printf "s3cret\\n\\n"')
    assert (await resolve_reference(resolver, "op://a", 5)).value == "s3cret\n"
    crlf = script(tmp_path, "crlf", 'printf "v\\r\\n"')
    assert (await resolve_reference(crlf, "x", 5)).value == "v"


@pytest.mark.parametrize(
    ("body", "failure"),
    [
        ("exit 2", "exit"),
        ('printf "\\n"', "empty"),
        ('printf "a\\000b"', "nul"),
        ("head -c 70000 /dev/zero | tr '\\0' x", "overflow"),
    ],
)
async def test_determinate_failures(tmp_path: Path, body: str, failure: str) -> None:
    assert (await resolve_reference(script(tmp_path, "r", body), "ref", 5)).failure == failure


@pytest.mark.parametrize("body", ["exit 1", "exit 7", "kill -9 $$"])
async def test_other_exits_are_retryable(tmp_path: Path, body: str) -> None:
    with pytest.raises(InfraRetry, match="secret-resolver-unreachable"):
        await resolve_reference(script(tmp_path, "r", body), "ref", 5)


@pytest.mark.slow
async def test_timeout_terminates_then_kills(tmp_path: Path) -> None:
    stubborn = script(tmp_path, "r", "trap '' TERM\nsleep 30")
    started = time.monotonic()
    with pytest.raises(InfraRetry):
        await resolve_reference(stubborn, "ref", 0.3)
    assert time.monotonic() - started < 15  # TERM ignored; KILL two seconds later, not the 30 s sleep


async def test_reference_is_an_argument_never_a_shell_word(tmp_path: Path) -> None:
    echo = script(tmp_path, "r", 'printf "%s" "$1"')
    assert (await resolve_reference(echo, "$(touch pwned); `id`", 5)).value == "$(touch pwned); `id`"
    assert not (tmp_path / "pwned").exists()


async def test_gate_resolves_each_reference_once_and_shares_values(tmp_path: Path) -> None:
    counter = tmp_path / "count"
    resolver = script(tmp_path, "r", f'echo x >> {counter}\nprintf "value-of-%s" "$1"')
    gate = SecretsGate({"prod": str(resolver)})
    values = await gate.resolve({"secretsProfile": "prod", "secrets": {"A": "ref1", "B": "ref1", "C": "ref2"}})
    assert values == {"A": "value-of-ref1", "B": "value-of-ref1", "C": "value-of-ref2"}
    assert counter.read_text().count("x") == 2


async def test_gate_refusals_name_the_profile_only(tmp_path: Path) -> None:
    resolver = script(tmp_path, "r", "printf v")
    not_executable = script(tmp_path, "n", "printf v", mode=0o644)
    gate = SecretsGate(
        {"prod": str(resolver), "broken": str(not_executable), "gone": str(tmp_path / "missing")},
        reserved=frozenset({"GITHUB_TOKEN"}),
    )
    assert await gate.resolve({"flow": "x"}) == {}
    assert await gate.resolve({"secretsProfile": "nope", "secrets": {"A": "r"}}) == Refusal(
        "secret-profile-unknown", "nope"
    )
    assert await gate.resolve({"secretsProfile": "broken"}) == Refusal("secret-profile-unknown", "broken")
    assert await gate.resolve({"secretsProfile": "gone"}) == Refusal("secret-profile-unknown", "gone")
    assert await gate.resolve({"secrets": {"A": "r"}}) == Refusal("secret-profile-unknown", "default")
    assert await gate.resolve({"secretsProfile": "prod", "secrets": {"GITHUB_TOKEN": "r"}}) == Refusal(
        "secret-name-reserved", "prod"
    )
    refusal = Refusal("secret-profile-unknown", "nope").result()
    assert refusal == {
        "outcome": "policy",
        "reason": "secret-profile-unknown",
        "exitCode": None,
        "turns": None,
        "tokens": None,
        "budgetReserved": False,
    }


def test_usable_script_follows_links(tmp_path: Path) -> None:
    target = script(tmp_path, "real", "exit 0")
    (tmp_path / "link").symlink_to(target)
    assert usable_script(str(tmp_path / "link")) == target
    assert usable_script(str(tmp_path)) is None


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("exit 0", WaitDecision("go", False)),
        ("exit 3", WaitDecision("hold", False)),
        ("exit 2", WaitDecision("refuse", False)),
        ("exit 1", WaitDecision("hold", True)),
        ("exit 9", WaitDecision("hold", True)),
        ("kill -9 $$", WaitDecision("hold", True)),
    ],
)
async def test_wait_check_exit_codes(tmp_path: Path, body: str, expected: WaitDecision) -> None:
    assert await run_wait_check(script(tmp_path, "c", body), "acme/web#7", 5) == expected


async def test_wait_check_waits_on_exit_not_on_pipes(tmp_path: Path) -> None:
    # The check answers at once but leaves a grandchild holding its stdout for 30 s.
    check = script(tmp_path, "c", "sleep 30 &\nexit 0")
    started = time.monotonic()
    assert await run_wait_check(check, "acme/web#7", 10) == WaitDecision("go", False)
    assert time.monotonic() - started < 8


@pytest.mark.parametrize("target", ["", "-rf", None, 7])
async def test_unusable_targets_are_never_spawned(tmp_path: Path, target: object) -> None:
    marker = tmp_path / "ran"
    check = script(tmp_path, "c", f"touch {marker}")
    assert await run_wait_check(check, target, 5) == WaitDecision("hold", True)
    assert not marker.exists()


async def test_a_wait_check_past_its_timeout_holds_with_a_retry(tmp_path: Path) -> None:
    slow = script(tmp_path, "c", "sleep 30")
    assert await run_wait_check(slow, "acme/web#7", 0.3) == WaitDecision("hold", True)


@pytest.mark.parametrize("when", ["starting", "running"])
async def test_a_cancelled_wait_check_is_aborted_whether_or_not_its_script_runs_yet(tmp_path: Path, when: str) -> None:
    """Cancelled while asyncio still starts the child (CI once cancelled one there: the abort raised instead), and
    once the script runs."""
    running = tmp_path / "running"
    slow = script(tmp_path, "c", f"touch {running}; sleep 30")
    task = asyncio.ensure_future(run_wait_check(slow, "acme/web#7", 30))
    await asyncio.sleep(0)  # the task's first step: the child forked, its start awaited
    if when == "running":
        deadline = time.monotonic() + 60  # a ceiling only a hang reaches
        while not running.exists() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
    task.cancel()
    assert await asyncio.wait_for(task, 60) == WaitDecision("hold", False, aborted=True)


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["resolver", "check"])
async def test_a_timed_out_script_and_its_children_are_gone(tmp_path: Path, kind: str) -> None:
    pids = tmp_path / "pids"
    stubborn = script(tmp_path, "s", f"trap '' TERM\nsleep 60 &\necho $$ $! > {pids}\nwait")
    if kind == "resolver":
        with pytest.raises(InfraRetry):
            await resolve_reference(stubborn, "ref", 0.5)
    else:
        assert await run_wait_check(stubborn, "acme/web#1", 0.5) == WaitDecision("hold", True)
    shell, child = (int(pid) for pid in pids.read_text().split())
    for _ in range(50):
        if gone(shell) and gone(child):
            break
        await asyncio.sleep(0.1)
    assert gone(shell) and gone(child)


async def test_the_timeout_bounds_the_whole_run(tmp_path: Path) -> None:
    # Prints its answer quickly, then keeps running: reading ends at once, exiting never does.
    lingering = script(tmp_path, "r", 'printf "v"\nexec 1>&-\nsleep 30')
    started = time.monotonic()
    with pytest.raises(InfraRetry):
        await resolve_reference(lingering, "ref", 1.0)
    assert time.monotonic() - started < 10  # 1 s bound plus TERM; not 2 x the bound and never the 30 s sleep


EXAMPLE_FILES = Path(__file__).resolve().parents[3] / "inventory.example" / "files"


async def test_the_example_resolver_follows_the_protocol(tmp_path: Path) -> None:
    (tmp_path / "deploy-token").write_text("s3cret\n")
    env = {"PATH": "/usr/bin:/bin", "EXAMPLE_SECRETS_DIR": str(tmp_path)}
    script = EXAMPLE_FILES / "resolve-example"
    assert (await resolve_reference(script, "deploy-token", 10, env)).value == "s3cret"
    for reference in ("missing", "../deploy-token", ".hidden", ""):
        assert (await resolve_reference(script, reference, 10, env)).failure == "exit"


async def test_the_example_check_goes_on_its_flag(tmp_path: Path) -> None:
    check = tmp_path / "ci"
    check.write_bytes((EXAMPLE_FILES / "check-flag").read_bytes())
    check.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "EXAMPLE_FLAGS_DIR": str(tmp_path)}
    assert (await run_wait_check(check, "acme/app#7", 10, env)).verdict == "hold"
    (tmp_path / "ci.green").touch()
    assert (await run_wait_check(check, "acme/app#7", 10, env)).verdict == "go"
    assert (await run_wait_check(check, "acme/app!7", 10, env)).verdict == "go"
    assert (await run_wait_check(check, "not-a-target", 10, env)).verdict == "refuse"


async def test_scripts_get_a_closed_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 53 (L6): a resolver or a wait check sees the host's basics and what PI_SCRIPT_ENV names, never the
    store's password or the worker's other credentials (the reference hands them the worker's whole environment)."""
    monkeypatch.setenv("VALKEY_PASSWORD", "store-password")
    monkeypatch.setenv("VALKEY_SENTINEL_PASSWORD", "sentinel-password")
    monkeypatch.setenv("GITHUB_PAT", "ghp-operator")
    monkeypatch.setenv("VAULT_TOKEN", "vault-token")
    printer = script(tmp_path, "r", "env | sort | tr '\\n' ' '")
    seen = (await resolve_reference(printer, "ref", 5)).value or ""
    assert "PATH=" in seen
    assert not {"store-password", "sentinel-password", "ghp-operator", "vault-token"} & set(
        seen.replace("=", " ").split()
    )
    passed = script_environment(("VAULT_TOKEN", "VALKEY_PASSWORD", "NOT_SET_ANYWHERE"))
    assert passed["VAULT_TOKEN"] == "vault-token" and "VALKEY_PASSWORD" not in passed
    assert "NOT_SET_ANYWHERE" not in passed
    seen = (await resolve_reference(printer, "ref", 5, passed)).value or ""
    assert "VAULT_TOKEN=vault-token" in seen and "store-password" not in seen
    check = script(tmp_path, "c", '[ -z "$VALKEY_PASSWORD$GITHUB_PAT" ] || exit 1')
    assert (await run_wait_check(check, "acme/app#7", 5)).verdict == "go"
    assert script_environment((), {})["PATH"] == "/usr/local/bin:/usr/bin:/bin"  # a script still finds its tools
