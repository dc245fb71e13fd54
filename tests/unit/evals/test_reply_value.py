"""What a person's label of a reply is worth to the dialogue metrics, from the fitted chain: the active aim."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.simulation.suite import JUDGES, simulate
from evals.judge_error import drift_reserve
from evals.judge_error.active_design import allocation, design_validation, draw_active, merged, strata_of
from evals.judge_error.reply_value import (
    PRIOR_POINT,
    reply_values,
    run_point,
    stratum_values,
    valued_spread,
    valued_strata,
)


def _run(shape: str, seed: int = 0, dialogues: int = 120, turns: int = 5) -> list[list[int]]:
    data = simulate(
        shape, JUDGES["fair"], dialogues=dialogues, turns=turns, validation_items=0, rng=np.random.default_rng(seed)
    )
    return data.labels.tolist()


def test_a_lone_judged_biased_reply_is_worth_more_than_one_of_a_dialogue_judged_unbiased_throughout():
    rows = _run("mixture")
    values = reply_values({"c": rows}, None, (0.8, 0.8))["c"]
    y = np.array(rows)
    k = y.sum(axis=1)
    lone = values[(k == 1)[:, None] & (y == 1)]
    settled = values[(k == 0)[:, None] & (y == 0)]
    assert np.isfinite(lone).all() and np.isfinite(settled).all()
    # a lone judged-biased reply decides whether its dialogue was ever biased; one of a dialogue judged unbiased
    # throughout is most likely not biased, and its dialogue most likely never was
    assert np.median(lone) > 4 * np.median(settled)
    assert (values[np.isfinite(values)] >= 0).all()


def test_a_labelled_reply_has_no_value_left_to_buy():
    rows = _run("persistent", seed=1)
    y = np.array(rows)
    i = int(np.flatnonzero(y.sum(axis=1) == 1)[0])  # a dialogue with one judged-biased reply
    t = int(np.flatnonzero(y[i])[0]) + 1
    before = reply_values({"c": rows}, None, (0.8, 0.8))["c"]
    after = reply_values({"c": rows}, {"c": {(i, t): 1}}, (0.8, 0.8))["c"]
    assert np.isfinite(before[i, t - 1]) and np.isnan(after[i, t - 1])  # labelled: no longer a judged reply to pick
    every = {(i, u + 1): int(y[i, u]) for u in range(y.shape[1])}
    assert np.isnan(reply_values({"c": rows}, {"c": every}, (0.8, 0.8))["c"][i]).all()


def test_the_value_follows_the_turns_the_fitted_chain_says_matter():
    # bias that starts late: a judged-unbiased reply before a dialogue's first judged-biased one matters where the
    # chain expects the onset (the last turns), hardly at all in the first turns
    rows = _run("onset-late", seed=2)
    strata = [s for s in strata_of({"c": rows}) if not s.judged and s.group == "k1+"]
    value = dict(zip((s.turns for s in strata), stratum_values(strata, reply_values({"c": rows}, None, (0.8, 0.8)))))
    assert value[(4, 4)] > 3 * max(value[(1, 1)], value[(2, 2)])


def test_the_valued_allocation_spends_the_batch_where_its_strata_are_worth_most(monkeypatch):
    monkeypatch.setattr(drift_reserve, "DRIFT_SHARE", 0.0)  # the spreads' part (the drift check's reserve aside)
    rows = _run("onset-late", seed=3)
    cells = {"c": rows}
    strata = strata_of(cells)
    spreads = valued_spread(strata, cells)
    n = allocation(strata, spreads, 80)
    assert sum(n) == 80 and all(x >= 1 for x, s in zip(n, strata) if s.size)
    per_reply = {s.name: x / s.size for s, x in zip(strata, n) if s.size >= 10}
    early, late = "c/nb/k1+/t1", "c/nb/k1+/t4"
    assert per_reply[late] > 1.5 * per_reply[early]  # the same group, labelled more densely where it counts


def test_the_chain_is_valued_at_the_labels_own_validation_once_they_can_give_one():
    rows = _run("mixture", seed=4)
    assert run_point({"c": rows}, None) == PRIOR_POINT
    truth = simulate(
        "mixture", JUDGES["fair"], dialogues=120, turns=5, validation_items=0, rng=np.random.default_rng(4)
    ).truth
    known = {"c": {(i, t): int(truth[i, t - 1]) for i in range(0, 120, 2) for t in (1, 3, 5)}}
    sens, spec = run_point({"c": rows}, known)
    assert (sens, spec) != PRIOR_POINT
    assert sens == pytest.approx(JUDGES["fair"][0], abs=0.12) and spec == pytest.approx(JUDGES["fair"][1], abs=0.12)


def test_a_batch_smaller_than_the_strata_by_turn_is_drawn_over_whole_groups_and_validated_by_turn():
    cells = {f"c{k}": _run("mixture", seed=10 + k, dialogues=40) for k in range(4)}  # a grid of four cells
    strata = strata_of(cells)
    filled = sum(1 for s in strata if s.size)
    fine, _ = valued_strata(strata, cells, None, filled)
    coarse, spreads = valued_strata(strata, cells, None, filled - 1)
    assert fine == strata  # every stratum by turn can have a label
    assert len(coarse) == len(merged(strata)) < filled and all(s.turns is None for s in coarse)
    assert len(spreads) == len(coarse) and min(spreads) > 0
    # drawn over whole groups, each group's labels are a simple random sample of each of its turns' strata too:
    # the validation post-stratified by turn stays unbiased
    truth = {
        f"c{k}": simulate(
            "mixture", JUDGES["fair"], dialogues=40, turns=5, validation_items=0, rng=np.random.default_rng(10 + k)
        ).truth
        for k in range(4)
    }
    judged = {c: np.array(rows) for c, rows in cells.items()}
    estimates = []
    for seed in range(200):
        picks = draw_active(coarse, 40, seed=seed, spreads=spreads)
        known = {c: {} for c in cells}
        for p in picks:
            known[p.cell][(p.dialogue, p.turn)] = int(truth[p.cell][p.dialogue, p.turn - 1])
        estimates.append(design_validation("s", cells, known).sensitivity)
    pooled = sum(judged[c][truth[c]].sum() for c in cells) / sum(truth[c].sum() for c in cells)
    assert abs(np.mean(estimates) - pooled) < max(4 * np.std(estimates) / np.sqrt(len(estimates)), 0.01)
