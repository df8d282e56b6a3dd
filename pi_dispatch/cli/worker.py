"""`pi-dispatch worker`: this host's worker, until SIGTERM (its run is `worker/entry.py`);
`pi-dispatch job-network`: the network its jobs join, kept off the host and the LAN (`worker/gates/jobnetwork.py`);
`pi-dispatch egress-proxy`: the proxy that is their one way out when egress is on (`worker/host/egressproxy.py`);
`pi-dispatch runtime-reap`: what a failed runsc start left behind (`worker/host/runtimereap.py`);
`pi-dispatch docker-proxy`: the only way its worker reaches Docker, when the role puts one in front
(`infra/dockerproxy.py`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from pi_dispatch.core.egress import EGRESS_BRIDGE, EGRESS_NETWORK, PROXY_STATE_DIR, proxy_state_dir
from pi_dispatch.infra.units import ENV_FILE_OPTION
from pi_dispatch.worker.gates.jobnetwork import DEFAULT_BRIDGE, DEFAULT_NETWORK


def worker(
    env_file: Annotated[
        Path | None,
        typer.Option(ENV_FILE_OPTION, help="Read this env file alone instead of the environment (as systemd would)."),
    ] = None,
) -> None:
    """Run this host's worker: drain pi-jobs and pi-jobs@<name> until SIGTERM, one container per job."""
    from pi_dispatch.worker.entry import run

    raise typer.Exit(run(env_file))


def job_network(
    name: Annotated[str, typer.Option(help="The Docker network jobs join (PI_JOB_NETWORK).")] = DEFAULT_NETWORK,
    bridge: Annotated[str, typer.Option(help="Its bridge interface, which the firewall rules name.")] = DEFAULT_BRIDGE,
    deny: Annotated[
        list[str] | None,
        typer.Option(help="Another address or IPv4 range jobs must not reach (a store on a public address); repeat."),
    ] = None,
    check: Annotated[
        bool, typer.Option("--check", help="Change nothing: exit 1 if the network or a rule is missing.")
    ] = False,
) -> None:
    """Make the network jobs run on, and the host firewall rules that keep them to the internet: off this host,
    private, shared and link-local ranges (the store, the LAN, 169.254.169.254). Idempotent; run as root, after
    the Docker daemon started (the worker role runs it from a oneshot unit).
    """
    import docker

    from pi_dispatch.cli.common import console
    from pi_dispatch.core.errors import ConfigError, Problem
    from pi_dispatch.worker.gates.jobnetwork import (
        JobNetworkError,
        apply_rules,
        denied_ranges,
        ensure_network,
        missing_rules,
        rules_for,
    )

    try:
        rules = rules_for(bridge, denied_ranges(deny or ()))
    except ValueError as error:
        raise ConfigError([Problem("--deny", str(error), "the command line", "an IPv4 address or range")]) from None
    client = _docker_or_exit("job network")
    try:
        if check:
            exists = name in {network.name for network in client.networks.list(names=[name])}
            missing = missing_rules(rules)
            for rule in missing:
                console.print(f"missing: {rule.shown()}", highlight=False, markup=False)
            if not exists:
                console.print(f"missing: the Docker network {name}", highlight=False, markup=False)
            raise typer.Exit(1 if missing or not exists else 0)
        made = ensure_network(client, name, bridge)
        added = apply_rules(rules)
    except (JobNetworkError, docker.errors.DockerException) as error:
        console.print(f"job network: {error}", highlight=False, markup=False)
        raise typer.Exit(1) from None
    finally:
        client.close()
    said = "made" if made else "in place"
    console.print(f"network {name} ({bridge}) {said}; {len(added)} of {len(rules)} rules added", highlight=False)


def egress_proxy(
    env_file: Annotated[
        Path | None,
        typer.Option(
            ENV_FILE_OPTION, help="The worker's env file (PI_EGRESS_ALLOWLIST_FILE, else the list beside it)."
        ),
    ] = None,
    name: Annotated[
        str | None,
        typer.Option(
            help=f"The Docker network egress jobs join (default: the env file's PI_JOB_NETWORK, else {EGRESS_NETWORK})."
        ),
    ] = None,
    bridge: Annotated[str, typer.Option(help="Its bridge interface, which the firewall rules name.")] = EGRESS_BRIDGE,
    state_dir: Annotated[
        Path | None,
        typer.Option(
            help=f"Where squid's rules, pid and refusal log are kept (PI_EGRESS_STATE_DIR, else {PROXY_STATE_DIR})."
        ),
    ] = None,
    log_group: Annotated[
        str | None,
        typer.Option(help="The worker's group, which may read the refusal log (squid's user writes it)."),
    ] = None,
    check: Annotated[
        bool, typer.Option("--check", help="Change nothing: exit 1 naming what is not up (network, rule, proxy).")
    ] = False,
) -> None:
    """Run the proxy that is egress jobs' one way out, in the foreground (as its unit runs it, as root): the allowlist
    read, the egress network and its firewall rules put in place, then Debian's squid with the rendered rules on the
    network's gateway. Exit 2 for a bad allowlist, 1 when Docker, iptables or squid fail.
    """
    import docker

    from pi_dispatch.cli.common import console
    from pi_dispatch.config.worker_settings import load_settings
    from pi_dispatch.worker.gates.jobnetwork import JobNetworkError
    from pi_dispatch.worker.host.egressproxy import (
        EgressPlace,
        allowlist_path,
        egress_plan,
        missing,
        prepare,
        read_allowlist,
        run_squid,
    )

    settings = load_settings(env_file) if env_file is not None or not check else None
    network = name or (settings.egress_network if settings is not None else None) or EGRESS_NETWORK
    state = state_dir or proxy_state_dir(settings.egress_state_dir if settings is not None else None)
    place = EgressPlace(network=network, bridge=bridge, state_dir=state, reader_group=log_group)
    allowlist = None
    profiles = egress_plan(settings).networks() if settings is not None else ()
    if settings is not None and not check:
        allowlist = read_allowlist(allowlist_path(settings.egress_allowlist_file, env_file))
    client = _docker_or_exit("egress proxy")
    try:
        if allowlist is None:
            gone = missing(client, place, profiles)
            for what in gone:
                console.print(f"missing: {what}", highlight=False, markup=False)
            raise typer.Exit(1 if gone else 0)
        conf = prepare(client, allowlist, place, profiles)
    except (JobNetworkError, docker.errors.DockerException, OSError) as error:
        console.print(f"egress proxy: {error}", highlight=False, markup=False)
        raise typer.Exit(1) from None
    finally:
        client.close()
    lists = f", {len(profiles)} profile lists" if profiles else ""
    console.print(
        f"egress proxy: {len(allowlist.destinations)} destinations allowed{lists}; squid starts", highlight=False
    )
    run_squid(conf)


def runtime_reap() -> None:
    """Remove what a failed runsc (gVisor) start left behind, which Docker no longer knows: the containerd container,
    its shim and gVisor's sandbox (as root, as the worker's unit runs it before each start). Exit 1 when containerd
    or Docker cannot be asked."""
    import subprocess

    import docker

    from pi_dispatch.cli.common import console
    from pi_dispatch.worker.host.runtimereap import ReapError, reap_runsc

    client = _docker_or_exit("runtime reap")
    try:
        found = reap_runsc(lambda: {c.id for c in client.containers.list(all=True, sparse=True)}, subprocess.run)
    except (ReapError, docker.errors.DockerException, OSError) as error:
        console.print(f"runtime reap: {error}", highlight=False, markup=False)
        raise typer.Exit(1) from None
    finally:
        client.close()
    console.print(f"runtime reap: {len(found)} left by a failed runsc start removed", highlight=False)


def _docker_or_exit(what: str) -> Any:
    """The Docker daemon's client, or exit 1 saying it does not answer."""
    from pi_dispatch.cli.common import console
    from pi_dispatch.infra.dockerclient import DockerUnreachable, docker_client

    try:
        return docker_client()
    except DockerUnreachable as unreachable:
        console.print(f"{what}: {unreachable}", highlight=False)
        raise typer.Exit(1) from None


def docker_proxy(
    socket_path: Annotated[Path, typer.Option("--socket", help="Where the worker reaches Docker through it.")],
    jobs_dir: Annotated[
        Path,
        # passed through, never read: the proxy may not list it (0711)
        typer.Option(help="The worker's jobs folder (PI_JOBS_DIR): the one bind source.", readable=False),
    ],
    group: Annotated[str | None, typer.Option(help="The worker's group, which may use the socket.")] = None,
    docker_socket: Annotated[Path, typer.Option("--docker", help="The daemon's own socket.")] = Path(
        "/var/run/docker.sock"
    ),
) -> None:
    """Serve the worker's Docker socket proxy until SIGTERM (as its unit runs it): the calls a worker makes and no
    others, a container create judged on its parsed body (no privilege, capability, host namespace, device, seccomp
    or apparmor change, and binds only under the jobs folder, links followed). Exit 2 when the jobs folder or the
    group is not there (the folder itself may come later: until it does, no bind is allowed)."""
    import asyncio
    import grp

    from pi_dispatch.core.dockerjudge import CreateJudge
    from pi_dispatch.core.errors import ConfigError, Problem
    from pi_dispatch.infra.dockerproxy import DockerProxy, resolver, run_proxy
    from pi_dispatch.infra.events import json_lines

    problems = []
    if not jobs_dir.is_absolute():
        problems.append(Problem("--jobs-dir", "is not an absolute path", "the command line", "PI_JOBS_DIR's"))
    try:
        gid = grp.getgrnam(group).gr_gid if group else None
    except KeyError:
        problems.append(Problem("--group", "names no group here", "the command line", "the worker's user's group"))
    if problems:
        raise ConfigError(problems)
    proxy = DockerProxy(CreateJudge(str(jobs_dir), resolver), str(docker_socket), json_lines(None))
    asyncio.run(run_proxy(proxy, str(socket_path), gid))
