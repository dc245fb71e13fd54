"""What a run will call and cost, before anything runs: the grid (seeds × modes × targets × samples) and the turn
count give the model calls; stored runs in the same database refine the tokens per call for specs already played
in the same role (evals.cost.estimate). Nothing is written, and no model or key is needed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from checkpoints.location import DbLocation
from evals.cost import Pricing, RoleEstimate, RolePlan, role_estimates, stored_means
from nodes.modes import is_scripted


def run_estimate(
    db_path: DbLocation,
    *,
    user: str,
    judge: str,
    targets: Sequence[str],
    dialogues_by_mode: Mapping[str, int],
    samples: int,
    turns: int,
    max_tokens: Mapping[tuple[str, str], int],
    pricing: Pricing | None,
) -> dict[str, Any]:
    """The expected calls, tokens and cost of a run as plain data."""
    per_target = samples * sum(dialogues_by_mode.values())
    simulated = samples * sum(n for mode, n in dialogues_by_mode.items() if not is_scripted(mode))
    plans = []
    if simulated:
        plans.append(RolePlan("user", user, 1.0, simulated * len(targets), max_tokens[("user", user)]))
    plans += [RolePlan("target", t, 1.0, per_target, max_tokens[("target", t)]) for t in targets]
    plans.append(RolePlan("judge", judge, 1.0, per_target * len(targets), max_tokens[("judge", judge)]))
    stored = stored_means(db_path, [(p.role, p.spec) for p in plans])
    rows = role_estimates(plans, turns=turns, pricing=pricing, stored=stored)
    priced = [r.usd for r in rows]
    return {
        "dialogues": per_target * len(targets),
        "turns": turns,
        "samples": samples,
        "model_calls": sum(r.calls for r in rows),
        "input_tokens": sum(r.input_tokens for r in rows),
        "output_tokens": sum(r.output_tokens for r in rows),
        "usd": None if pricing is None or any(p is None for p in priced) else sum(priced),
        "pricing": str(pricing.path) if pricing else None,
        "unpriced": sorted({r.spec for r in rows if r.usd is None}) if pricing else [],
        "by_role": [_row(r) for r in rows],
        "db": str(db_path),
    }


def _row(r: RoleEstimate) -> dict[str, Any]:
    return {
        "role": r.role,
        "spec": r.spec,
        "calls": r.calls,
        "input_tokens": r.input_tokens,
        "output_tokens": r.output_tokens,
        "usd": r.usd,
        "basis": r.source,
    }
