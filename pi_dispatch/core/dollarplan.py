"""Which dollar windows a job holds its cap in, in the reference's order (upstream-limits §3.6), and the `fpUsd`
fingerprint of them that a host publishes in its row (§3.7).

1. the fleet's own windows (`budget:usd`: PI_DAILY_COST_USD, PI_WEEKLY_COST_USD, PI_MONTHLY_COST_USD);
2. the job's scoped-limits row, when it caps dollars (`budget:usd:s:<hash16(row scope)>`);
3. each model row that applies (`budget:usd:mdl:<hash16(provider/model)>`): those of the models the job lists
   (`models`, compared case-insensitively), or every model row for a job that lists none (it could call any).

The reference's project rows and allocation envelope are not read by this build (a project row refuses the file).
Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from pi_dispatch.core.budget import WINDOWS, WindowCaps, hash16
from pi_dispatch.core.money import Amount, usd_fingerprint
from pi_dispatch.core.scopedlimits import ScopedLimits, ScopeRow

USD_PREFIX: Final = "budget:usd"
FPUSD_ROW_FIELD: Final = "fpUsd"  # the registry row's field for `host_usd_fingerprint`
EMPTY_USD_FINGERPRINT: Final = "7c593dfc8f2f8c36"  # no dollar cap at all (the spec's golden)
LedgerKind = Literal["deployment", "scope", "model"]


@dataclass(frozen=True)
class DollarLedger:
    prefix: str  # USD_PREFIX, or `budget:usd:s:<hash16>`, `budget:usd:mdl:<hash16>`
    caps: WindowCaps  # in micro-dollars
    kind: LedgerKind = "deployment"
    model: str | None = None  # a model row's `provider/model`, lowercased


def usd_scope_prefix(scope: str) -> str:
    return f"{USD_PREFIX}:s:{hash16(scope)}"


def usd_model_prefix(model: str) -> str:
    return f"{USD_PREFIX}:mdl:{hash16(model.lower())}"


def row_ledger(row: ScopeRow) -> DollarLedger:
    if row.model is not None:
        return DollarLedger(usd_model_prefix(row.model), row.dollars, "model", row.model)
    return DollarLedger(usd_scope_prefix(row.scope), row.dollars, "scope")


def job_models(data: Mapping[str, Any]) -> frozenset[str] | None:
    """The models a job may call (its `models`, lowercased), or None when it lists none."""
    listed = data.get("models")
    if not isinstance(listed, list) or not listed:
        return None
    return frozenset(model.lower() for model in listed if isinstance(model, str))


def dollar_ledgers(fleet: WindowCaps, scoped: ScopedLimits, data: Mapping[str, Any]) -> list[DollarLedger]:
    """The ledgers a job holds its cap in, in reservation order; each has at least one window."""
    ledgers = [DollarLedger(USD_PREFIX, fleet)] if fleet.active() else []
    row = scoped.row_of(data)
    if row is not None and row.dollars.active():
        ledgers.append(row_ledger(row))
    models = job_models(data)
    ledgers += [
        row_ledger(model_row)
        for model_row in scoped.model_rows()
        if model_row.dollars.active() and (models is None or model_row.model in models)
    ]
    return ledgers


def _amounts(caps: WindowCaps) -> dict[str, Amount]:
    return {spec.usd_field: cap for spec, cap in zip(WINDOWS, caps.values(), strict=True)}


def host_usd_fingerprint(job_cap: int | None, fleet: WindowCaps, scoped: ScopedLimits) -> str:
    """This host's `fpUsd`: its dollar settings, its dollar rows by their key prefix, and the model rows a job with
    no list of its own reserves in (all of them: this build has no PI_ALLOWED_MODELS)."""
    settings: dict[str, Amount] = {"maxCostUsd": job_cap}
    settings |= {spec.policy_field: cap for spec, cap in zip(WINDOWS, fleet.values(), strict=True)}
    rows: Sequence[Mapping[str, Amount]] = [
        {"counter": row_ledger(row).prefix, **_amounts(row.dollars)} for row in scoped.dollar_rows()
    ]
    untargeted = [row_ledger(row).prefix for row in scoped.model_rows() if row.dollars.active()]
    return usd_fingerprint(settings, rows, untargeted)


def spend_groups(fingerprints: Mapping[str, str | None]) -> dict[str, list[str]]:
    """Hosts grouped by the dollar caps they publish (`none`: no `fpUsd`), when they differ as a Node doctor warns
    of it: two fingerprints, or none beside one that caps dollars; {} when they agree or nobody caps dollars."""
    groups: dict[str, list[str]] = {}
    for name, fingerprint in sorted(fingerprints.items()):
        groups.setdefault(fingerprint or "none", []).append(name)
    if len(groups) < 2 or set(groups) <= {"none", EMPTY_USD_FINGERPRINT}:
        return {}
    return groups
