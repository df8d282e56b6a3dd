"""Python against the seed's own JavaScript, on thousands of generated cases including hostile ones.

The seed's `capabilities.mjs` and `run-mirror.mjs` are extracted from the reference diff at test time and
evaluated under node. Skips, saying so, only where node is missing. Timestamps are drawn from the ISO
forms the reference writes and from garbage V8 rejects; V8's legacy non-ISO date parser (which reads
"2026/08/30" or "5" as dates) is outside the port's contract, see `jscompat.date_parse`.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from pi_dispatch.core import capabilities, routing
from pi_dispatch.core.jscompat import MISSING, get, js_json
from pi_dispatch.fleet import mirror
from pi_dispatch.testing.seed import extract_seed_modules, node_binary, run_seed

pytestmark = [pytest.mark.node]

SEED = 20261130
CASES_PER_FUNCTION = {
    "routeForgeJob": 2500,
    "parseCaps": 600,
    "jobNeeds": 600,
    "capabilityTokens": 300,
    "serializeCaps": 100,
    "mirrorWindowMs": 300,
    "mergeRuns": 1200,
    "hostsIn": 300,
}

NAMES = ["mini1", "mini2", "mini3", "a", "b", "Mini1", "z", "", "é", "😀", "\uff5e", "a:b", "x,y", "mini1\n", "\ud800"]
PROFILES = ["prod", "ci", "staging", "default", "a.b_c-9", "bad name", "a:b", "", "..", "é", "x,y", "ci\n"]
TIMESTAMPS = [
    "2026-08-30T12:00:00.000Z",
    "2026-08-30T12:00:00Z",
    "2026-08-30T11:59:59.999Z",
    "2026-08-30T12:00Z",
    "2026-08-30T14:00:00+02:00",
    "2026-08-30T12:00:00.1234Z",
    "2026-08-30",
    "2026-08",
    "2026",
    "2026-02-31T00:00:00Z",
    "2026-08-30T24:00:00Z",
    "+002026-08-30T12:00:00Z",
    "2026-08-30t12:00:00z",
    "2026-08-30T12:00:00.000-05:30",
    "garbage",
    "",
    "2026-13-01T00:00:00Z",
    "2026-08-30T25:00:00Z",
    "2026-08-30T12:00:00.000+24:00",
    "not-a-date",
    "2026-08-30T12:00:00.000Zjunk",
    "NaN",
    "+275760-09-13T00:00:00.001Z",
    "-000000-01-01T00:00:00Z",
]


def pick(rng: random.Random, pool: list[Any]) -> Any:
    return pool[rng.randrange(len(pool))]


def job_id(rng: random.Random) -> Any:
    kind = rng.randrange(10)
    if kind < 5:
        return f"{pick(rng, ['gh-', 'gl-', 'fj-', 'az-', ''])}{rng.getrandbits(64):x}" + pick(rng, ["", "-r2", "-r10"])
    if kind == 5:
        return "".join(
            chr(rng.choice([rng.randrange(32, 127), rng.randrange(0xA0, 0xD7FF), rng.randrange(0x10000, 0x10FFFF)]))
            for _ in range(rng.randrange(0, 12))
        )
    return pick(rng, ["", None, 0, 7, 1.5, True, ["a", None, 2], {"x": 1}, "\ud83d", "j1"])


def caps_raw(rng: random.Random) -> Any:
    if rng.random() < 0.1:
        return pick(rng, [None, 5, True, ["s:prod", "w:ci"], {"a": 1}])
    parts = [
        f"{pick(rng, ['s', 'w', 'S', 'x', ''])}{pick(rng, [':', ':', '::', ''])}{pick(rng, PROFILES)}"
        for _ in range(rng.randrange(0, 5))
    ]
    return ",".join(parts)


def stale(rng: random.Random) -> Any:
    return pick(
        rng,
        [
            0,
            1,
            44_999,
            45_000,
            45_001,
            90_000,
            -5,
            1.5,
            "",
            " 12 ",
            "45000",
            "0x10",
            "1e3",
            "abc",
            None,
            True,
            [],
            [5],
            [1, 2],
            "Infinity",
            45_000.0001,
            "\u00a07\u2028",
        ],
    )


def host(rng: random.Random) -> Any:
    if rng.random() < 0.04:
        return pick(rng, [None, "mini1", 7, [], True])
    row: dict[str, Any] = {}
    for key, make in (
        ("name", lambda: pick(rng, [*NAMES, None, 5])),
        ("caps", lambda: caps_raw(rng)),
        ("routes", lambda: pick(rng, ["true", "true", True, "false", False, "TRUE", 1, None])),
        ("staleMs", lambda: stale(rng)),
    ):
        if rng.random() < 0.9:
            row[key] = make()
    return row


def job(rng: random.Random) -> Any:
    if rng.random() < 0.05:
        return pick(rng, [None, "job", 5, []])
    data: dict[str, Any] = {}
    if rng.random() < 0.6:
        data["secretsProfile"] = pick(rng, [*PROFILES, None, 5, ["prod"]])
    if rng.random() < 0.6:
        conditions = [
            pick(rng, [{"profile": pick(rng, PROFILES)}, {"after": "2026-09-01T00:00:00Z"}, None, "ci", {}])
            for _ in range(rng.randrange(0, 5))
        ]
        data["waitFor"] = conditions if rng.random() < 0.9 else "ci"
    return data


def record(rng: random.Random) -> Any:
    if rng.random() < 0.03:
        return pick(rng, [None, "run", 3])
    data: dict[str, Any] = {"n": rng.randrange(10**6)}
    if rng.random() < 0.95:
        data["jobId"] = pick(rng, ["a", "b", "c", "d", "1", 1, 0, "", None, True, 1.0, "é", {"k": 1}])
    if rng.random() < 0.8:
        data["endedAt"] = pick(rng, [*TIMESTAMPS, None])
    if rng.random() < 0.5:
        data["startedAt"] = pick(rng, TIMESTAMPS)
    if rng.random() < 0.8:
        data["host"] = pick(rng, [*NAMES, None, 3])
    return data


def route_case(rng: random.Random) -> dict[str, Any]:
    hosts = [host(rng) for _ in range(rng.randrange(0, 7))]
    if rng.random() < 0.5:  # a realistic fleet: valid rows, freshness at the edges
        hosts = [
            {
                "name": pick(rng, [f"m{i}", f"mini{i}"]),
                "caps": pick(rng, ["s:prod", "s:prod,w:ci", "w:ci", ""]),
                "routes": pick(rng, ["true", "true", "false"]),
                "staleMs": pick(rng, [0, 44_999, 45_000, 45_001, rng.randrange(0, 60_000)]),
            }
            for i in range(rng.randrange(1, 6))
        ]
    options: dict[str, Any] = {"hosts": hosts if rng.random() < 0.95 else pick(rng, [None, "x", {}])}
    if rng.random() < 0.4:
        needs: Any = pick(rng, [["s:prod"], ["w:ci"], ["s:prod", "w:ci"]])
    elif rng.random() < 0.8:
        needs = capabilities.job_needs(job(rng))
    else:
        needs = [pick(rng, ["s:prod", "w:ci", "x", 5, None])]
    options["needs"] = needs if rng.random() < 0.97 else pick(rng, [None, "s:prod"])
    if rng.random() < 0.97:
        options["jobId"] = job_id(rng)
    if rng.random() < 0.1:
        options["freshMs"] = pick(rng, [0, 1_000, 90_000, 45_000.5])
    return {"options": options}


def tokens_case(rng: random.Random) -> dict[str, Any]:
    profiles: dict[str, Any] = {}
    for key in ("secretProfiles", "waitProfiles"):
        if rng.random() < 0.85:
            profiles[key] = {pick(rng, PROFILES): "/x" for _ in range(rng.randrange(0, 4))}
        elif rng.random() < 0.5:
            profiles[key] = pick(rng, [None, "ab", ["p", "q"], 5])
    return {"profiles": profiles}


def merge_case(rng: random.Random) -> dict[str, Any]:
    local = [record(rng) for _ in range(rng.randrange(0, 6))]
    mirrored = [record(rng) for _ in range(rng.randrange(0, 6))]
    args: dict[str, Any] = {
        "local": local if rng.random() < 0.95 else None,
        "mirrored": mirrored if rng.random() < 0.9 else pick(rng, [None, "x"]),
    }
    if rng.random() < 0.8:
        args["options"] = {"limit": pick(rng, [0, 1, 2, 3, 5, 50, -1])}
    return args


WINDOW_DAYS = [0, 1, 7, 30, 92, 93, 365, -1, 1.5, 0.25, "7", " 14 ", "", "abc", None, True, "Infinity", [3]]
CASE_MAKERS = {
    "routeForgeJob": route_case,
    "parseCaps": lambda rng: {"raw": caps_raw(rng)} if rng.random() < 0.95 else {},
    "jobNeeds": lambda rng: {"job": job(rng)},
    "capabilityTokens": tokens_case,
    "serializeCaps": lambda rng: {"tokens": [f"s:{pick(rng, PROFILES)}" for _ in range(rng.randrange(0, 4))]},
    "mirrorWindowMs": lambda rng: {"days": pick(rng, WINDOW_DAYS)} if rng.random() < 0.95 else {},
    "mergeRuns": merge_case,
    "hostsIn": lambda rng: {"runs": [record(rng) for _ in range(rng.randrange(0, 6))]},
}


def generate() -> list[tuple[str, dict[str, Any]]]:
    rng = random.Random(SEED)
    return [(fn, CASE_MAKERS[fn](rng)) for fn, count in CASES_PER_FUNCTION.items() for _ in range(count)]


def arg(args: dict[str, Any], key: str) -> Any:
    return args.get(key, MISSING)


def _route(args: dict[str, Any]) -> Any:
    options = args["options"]
    fresh = get(options, "freshMs")
    kwargs = {} if fresh is MISSING else {"fresh_ms": fresh}
    return routing.route_forge_job(get(options, "hosts"), get(options, "needs"), get(options, "jobId"), **kwargs)


def _explained(args: dict[str, Any]) -> Any:
    """The host `explain_route` names for a routing case of the shapes an operator's command meets (a list of
    hosts, needs that are names); None for the other cases."""
    options = args["options"]
    hosts, needs, fresh = get(options, "hosts"), get(options, "needs"), get(options, "freshMs")
    if not isinstance(hosts, list) or not isinstance(needs, list) or not all(isinstance(n, str) for n in needs):
        return None
    kwargs = {} if fresh is MISSING else {"fresh_ms": fresh}
    return routing.explain_needs(hosts, needs, get(options, "jobId"), **kwargs).host


def _merge(args: dict[str, Any]) -> Any:
    limit = get(args.get("options"), "limit")
    return mirror.merge_runs(args["local"], args["mirrored"], **({} if limit is MISSING else {"limit": limit}))


PYTHON = {
    "routeForgeJob": _route,
    "parseCaps": lambda args: capabilities.parse_caps_ordered(arg(args, "raw")),
    "jobNeeds": lambda args: capabilities.job_needs(args["job"]),
    "capabilityTokens": lambda args: capabilities.capability_tokens(
        args["profiles"].get("secretProfiles"), args["profiles"].get("waitProfiles")
    ),
    "serializeCaps": lambda args: capabilities.serialize_caps(args["tokens"]),
    "mirrorWindowMs": lambda args: mirror.mirror_window_ms(arg(args, "days")),
    "mergeRuns": _merge,
    "hostsIn": lambda args: mirror.hosts_in(args["runs"]),
}


def canonical(value: Any) -> str:
    """JSON as JSON.stringify writes it, so 1.0 and 1 are the one number they are in JavaScript."""
    return js_json(value)


def test_python_matches_the_seed(seed_diff: Path, tmp_path: Path) -> None:
    node = node_binary()
    if node is None:
        pytest.skip("node is not installed, so the seed's JavaScript cannot be run (apt-get install nodejs)")
    modules = extract_seed_modules(seed_diff, tmp_path)
    cases = generate()
    assert len(cases) >= 2000
    # Python reads the cases from the same JSON text node does, so both see identical values.
    python_cases = json.loads(json.dumps(cases))
    answers = run_seed(node, modules, tmp_path, cases)
    mismatches = []
    explained = 0
    for (fn, args), answer in zip(python_cases, answers, strict=True):
        assert "threw" not in answer, f"the seed threw on {fn} {args}: {answer}"
        mine = PYTHON[fn](args)
        if canonical(mine) != canonical(answer["ok"]):
            mismatches.append((fn, args, answer["ok"], mine))
        if fn == "routeForgeJob" and (explanation := _explained(args)) is not None:
            explained += 1  # `route` and `job` tell the operator the decision the router takes, case for case
            if canonical(explanation) != canonical(answer["ok"]):
                mismatches.append(("explain_route", args, answer["ok"], explanation))
    assert explained >= 100, explained  # 176 of the 2,500 routing cases are of those shapes (the seed is fixed)
    by_function: dict[str, int] = {}
    for fn, *_ in mismatches:
        by_function[fn] = by_function.get(fn, 0) + 1
    assert not mismatches, f"{len(mismatches)} of {len(cases)} differ ({by_function}); first: {mismatches[:2]}"
