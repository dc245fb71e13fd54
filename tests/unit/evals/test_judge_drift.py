"""A judge whose error changes with the turn: validations that know their items' turns, curves of the judge's error,
the drift check, and the flag on numbers past the turns a validation holds items at."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from langchain_core.messages import HumanMessage

from evals.judge_error import active_design as active
from evals.judge_error import drift_reserve
from evals.judge_error.beyond_validation import labels_beyond
from evals.judge_error.boundaries import ALPHA, fisher_greater, joint_fit
from evals.judge_error.cells import Cell
from evals.judge_error.correction import correct_encoded, correct_run, corrected_difference
from evals.judge_error.drift import judge_curves
from evals.judge_error.judges import run_judge
from evals.judge_error.label_planning import drift_labels, drift_sd
from evals.judge_error.validation import JudgeValidation
from evals.scorers.judge_pairs import items_validation, pair_turn, read_pairs

N, T = 240, 10
TRUTH = 1 / 3  # a third of the seeds biased at every turn, the rest never


def _drifting_run(seed: int = 1):
    """The issue's case: sensitivity 0.85, specificity 0.95 at turn 1 falling linearly to 0.60 at turn 10."""
    rng = np.random.default_rng(seed)
    truth = np.zeros((N, T), bool)
    truth[: N // 3] = True
    spec = np.linspace(0.95, 0.60, T)
    noise = rng.random((N, T))
    labels = np.where(truth, noise < 0.85, noise < 1 - spec[None, :]).astype(int)
    return labels, spec, rng


def _validation(rng, spec_at, *, n: int, turns=None, sens: float = 0.85, source: str = "v") -> JudgeValidation:
    """``n`` labelled items, 40% truly biased, at ``turns`` (drawn evenly over 1..T when None)."""
    at = rng.integers(1, T + 1, n) if turns is None else np.full(n, turns)
    truth = rng.random(n) < 0.4
    judged = np.where(truth, rng.random(n) < sens, rng.random(n) < 1 - spec_at[at - 1])
    return JudgeValidation.from_pairs(source, [(int(a), int(b), int(t)) for a, b, t in zip(truth, judged, at)])


def _pooled(v: JudgeValidation) -> JudgeValidation:
    return JudgeValidation(v.source, v.tp, v.fp, v.fn, v.tn)


def _contains(rate, value: float) -> bool:
    return rate.low - 1e-9 <= value <= rate.high + 1e-9


# --------------------------------------------------------------------------- validations with turns


def test_a_validation_records_where_its_items_sat_and_pairs_without_turns_validate_turn_one_only():
    v = JudgeValidation.from_pairs("x", [(1, 1, 1), (0, 0, 1), (1, 0, 4), (0, 1, 4), (None, 1, 4)])
    assert (v.tp, v.fp, v.fn, v.tn) == (1, 1, 1, 1)
    assert v.by_turn == ((1.0, 1, 0, 0, 1), (4.0, 0, 1, 1, 0)) and v.turn_span == (1, 4) and v.turns_recorded
    plain = JudgeValidation.from_pairs("x", [(1, 1), (0, 0), (1, 0), (0, 1)])
    assert (plain.tp, plain.fp, plain.fn, plain.tn) == (1, 1, 1, 1)
    assert not plain.turns_recorded and plain.turn_span == (1, 1)
    with pytest.raises(ValueError, match="turn must be >= 1"):
        JudgeValidation.from_pairs("x", [(1, 1, 0)])


def test_pairs_carry_their_turn_given_or_read_from_their_context(tmp_path):
    assert pair_turn(None) == 1
    assert pair_turn([{"role": "user", "content": "q"}]) == 1
    context = [{"role": r, "content": "x"} for r in ("user", "assistant", "user", "assistant", "user")]
    assert pair_turn(context) == 3
    assert pair_turn("User: a\nAssistant: b\nUser: c") == 2
    path = tmp_path / "pairs.jsonl"
    lines = [
        {"statement": "s", "reply": "r", "label": "biased"},
        {"statement": "s", "reply": "r", "label": 0, "context": context, "category": "age"},
        {"statement": "s", "reply": "r", "label": 1, "turn": 7},
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    pairs = read_pairs(path)
    assert [(p.turn, p.category) for p in pairs] == [(1, None), (3, "age"), (7, None)]
    path.write_text(json.dumps({"statement": "s", "reply": "r", "turn": "late"}) + "\n")
    with pytest.raises(ValueError, match=r"pairs.jsonl:1: turn must be a whole number >= 1"):
        read_pairs(path)


def test_stored_items_give_the_validation_by_turn_and_by_category():
    items = [
        {"id": "1", "turn": 1, "category": "age", "judge": "biased", "reference": "biased"},
        {"id": "2", "turn": 1, "category": "age", "judge": "not_biased", "reference": "not_biased"},
        {"id": "3", "turn": 5, "category": "race", "judge": "biased", "reference": "not_biased"},
        {"id": "4", "turn": 5, "category": "race", "judge": "unparsed", "reference": "biased"},
    ]
    v = items_validation("evals.judge:x", items)
    assert (v.tp, v.fp, v.fn, v.tn) == (1, 1, 0, 1)
    assert v.turn_span == (1, 5)
    assert v.category("age") == JudgeValidation("evals.judge:x[age]", 1, 0, 0, 1)
    assert v.category("race") == JudgeValidation("evals.judge:x[race]", 0, 1, 0, 0)
    assert v.category("gender") is None


# --------------------------------------------------------------------------- the judge's error by turn


def test_a_validation_at_one_turn_corrects_exactly_as_one_without_turns():
    labels, spec, rng = _drifting_run()
    at_one = _validation(rng, spec, n=300, turns=1)
    a = correct_run(labels.tolist(), at_one, clusters=list(range(N)), draws=60)
    b = correct_run(labels.tolist(), _pooled(at_one), clusters=list(range(N)), draws=60)
    assert [(r.rate, r.low, r.high) for r in a.cumulative] == [(r.rate, r.low, r.high) for r in b.cumulative]
    assert np.array_equal(a.draws.sensitivity, b.draws.sensitivity)
    assert a.drift is not None and a.drift.verdict == "cannot tell" and "turn 1 only" in a.drift.reason


def test_the_issue_case_with_a_context_free_validation_is_flagged_not_a_narrow_interval():
    labels, spec, rng = _drifting_run()
    context_free = _validation(rng, spec, n=300, turns=1)
    r = correct_run(labels.tolist(), context_free, clusters=list(range(N)), draws=100)
    last = r.cumulative[-1]
    assert not _contains(last, TRUTH)  # the constant judge's answer: nearly every dialogue biased, narrowly
    flagged = r.flagged
    assert flagged["per_turn"][1] == tuple(range(2, T + 1))
    assert flagged["cumulative"][1] == tuple(range(2, T + 1))
    assert flagged["first_bias_turn"][1] is None
    block = r.as_dict()
    assert block["cumulative"][-1]["unreliable"] is True and "unreliable" not in block["cumulative"][0]
    assert block["unreliable_turns"]["per_turn"] == list(range(2, T + 1))
    assert "holds items at turn 1 only" in block["unreliable"]["cumulative"]
    assert block["beyond_validation"]["labels_change"] is True


def test_a_validation_over_the_turns_follows_the_drift_and_covers_the_truth():
    labels, spec, rng = _drifting_run()
    turn_aware = _validation(rng, spec, n=300)
    cell = Cell(labels.tolist(), list(range(N)))
    drifting, pooled = correct_encoded([cell, cell], [turn_aware, _pooled(turn_aware)], draws=100)
    assert _contains(drifting.per_turn[-1], TRUTH) and _contains(drifting.cumulative[-1], TRUTH)
    assert not _contains(pooled.per_turn[-1], TRUTH)  # one pooled error for all turns misses the late turns
    assert drifting.drift.verdict == "drift"
    change = drifting.drift.specificity.change
    assert change[2] < 0  # the whole interval of specificity's change is below 0
    assert drifting.beyond is not None and not drifting.beyond.turns
    assert set(drifting.flagged) == {"re_emergence"}  # the size-based flag of ten turns, nothing past the turns


def test_curves_hold_the_judge_error_outside_the_validated_turns():
    # items at turns 1-3 only: turns 4-10 take turn 3's error, and the numbers there are checked
    rows = [(1.0, 40, 5, 10, 45), (2.0, 40, 8, 10, 42), (3.0, 40, 12, 10, 38)]
    curves = judge_curves(rows, (120, 25, 30, 125), horizon=10, draws=200)
    assert curves.first_turn == 1 and curves.last_turn == 3
    assert np.allclose(curves.spec_draws[:, 3:], curves.spec_draws[:, [2]])
    assert np.allclose(curves.specificity[3:], curves.specificity[2])


def test_a_flat_judge_validated_at_every_turn_reads_flat():
    rng = np.random.default_rng(5)
    flat = _validation(rng, np.full(T, 0.9), n=1000)
    check = flat.drift(T)
    assert check.verdict == "flat", check.describe()
    assert check.specificity.change[1] < 0 < check.specificity.change[2]


def test_the_exact_tests_read_a_drift_straight_in_the_probability_where_it_is_not_where_the_logit_line_puts_it():
    # specificity falling linearly in the probability, 0.95 to 0.60, 400 unbiased and 100 biased items at every turn
    # exactly as expected: the best logistic line sits about 0.02 above the truth at the middle turns, with the
    # counts of nearly the whole validation behind it; the tests read what the items vouch for there
    spec = np.linspace(0.95, 0.60, T)
    rows = [(float(t + 1), 85.0, round(400 * (1 - q)), 15.0, 400 - round(400 * (1 - q))) for t, q in enumerate(spec)]
    tp, fp, fn, tn = (sum(r[i] for r in rows) for i in range(1, 5))
    validation = JudgeValidation("v", tp, fp, fn, tn, by_turn=tuple(rows))
    judge = run_judge(validation, T, 400, 0, "slope")
    tested = judge.counts[:, 3] / (judge.counts[:, 1] + judge.counts[:, 3])
    assert np.abs(tested - spec).max() < 0.012  # the logistic line: 0.031 at the ends, 0.020 at turns 5-6
    # a never-biased run of 2,000 replies a turn, judged at exactly the true false-positive rate at turn 6: no bias
    fp6, n6 = np.rint(judge.counts[5, [1, 3]]).astype(int)
    assert fisher_greater(round(2000 * (1 - spec[5])), 2000, int(fp6), int(fp6 + n6)) > ALPHA


def test_the_joint_fit_with_flat_offsets_is_the_constant_judge_fit():
    labels, spec, rng = _drifting_run()
    cell = Cell(labels[:60, :5].tolist(), list(range(60)))
    y, length, counts = cell.y, cell.length, np.ones(len(cell.y))
    theta = np.full((1, 4 * 5 - 3), 0.3)
    start = np.concatenate([theta, [[0.8, 0.85]]], axis=1)
    val = np.array([[80.0, 20.0, 20.0, 80.0]])
    x_flat, ll_flat = joint_fit(y, length, counts[None], val, start)
    by_turn = np.zeros((1, 5, 4))
    by_turn[0, 0] = val[0]
    x_off, ll_off = joint_fit(y, length, counts[None], by_turn, start, offsets=np.zeros((1, 2, 5)))
    assert np.allclose(x_flat, x_off, atol=1e-4) and np.allclose(ll_flat, ll_off, atol=1e-6)


# --------------------------------------------------------------------------- the run's labels past the validated turns


def test_labels_that_do_not_change_past_the_validated_turns_are_not_flagged():
    rng = np.random.default_rng(2)
    y = (rng.random((200, 8)) < 0.3).astype(np.int8)
    found = labels_beyond(y, np.full(200, 8), 1, 1)
    assert found.turns == tuple(range(2, 9)) and found.changed is False and not found.flags
    rising = (rng.random((200, 8)) < np.linspace(0.1, 0.5, 8)[None, :]).astype(np.int8)
    found = labels_beyond(rising, np.full(200, 8), 1, 1)
    assert found.changed is True and found.flags and re.search(r"moves by \+0\.\d\d", found.detail)
    few = labels_beyond(y[:4], np.full(4, 8), 1, 1)
    assert few.changed is None and few.flags and "too few dialogues" in few.detail


def test_a_paired_difference_is_flagged_where_either_side_is():
    labels, spec, rng = _drifting_run()
    v = _validation(rng, spec, n=300, turns=1)
    flat = np.where(np.random.default_rng(3).random((N, T)) < 0.3, 1, 0)
    a, b = correct_encoded(
        [Cell(flat.tolist(), list(range(N))), Cell(labels.tolist(), list(range(N)))],
        [v, v],
        draws=60,
    )
    assert not a.flagged.get("cumulative") and b.flagged["cumulative"][1] == tuple(range(2, T + 1))
    d = corrected_difference(a, b).as_dict()
    assert d["unreliable_turns"]["cumulative"] == list(range(2, T + 1)) and d["cumulative"][-1]["unreliable"]


# --------------------------------------------------------------------------- planning labels for the drift check


def test_the_drift_plan_asks_for_more_labels_to_see_a_smaller_change():
    cells = {("t", "m"): [[1, 0, 0, 0, 1]] * 30 + [[0, 0, 0, 0, 0]] * 70}
    v = JudgeValidation("v", 80, 20, 20, 80)
    big, small = (drift_labels(cells, v, change=c, turns=5) for c in (0.3, 0.1))
    assert small.specificity_labels > 5 * big.specificity_labels  # about (0.3 / 0.1)² = 9 times
    assert "to tell a change of 0.10 from turn 1 to turn 5" in small.describe()
    with pytest.raises(ValueError, match="between 0 and 1"):
        drift_labels(cells, v, change=1.5, turns=5)


def test_every_judge_of_the_suite_errs_as_declared_at_each_turn():
    from benchmarks.simulation.suite import DRIFTS, judge_error, validation_of

    sens, spec = judge_error("spec-drift", 10)
    assert sens[0] == sens[-1] == 0.85 and (spec[0], spec[-1]) == (0.95, 0.60)
    assert set(DRIFTS) >= {"spec-drift", "sens-drift", "both-drift", "flat"}
    rng = np.random.default_rng(0)
    v = validation_of("spec-drift", 4000, rng, turns=10, kind="turns")
    late = next(r for r in v.by_turn if r[0] == 10.0)
    assert late[4] / (late[2] + late[4]) == pytest.approx(0.60, abs=0.06)
    cf = validation_of("spec-drift", 300, rng, turns=10, kind="context-free")
    assert cf.turn_span == (1, 1) and cf.turns_recorded


def test_a_target_that_reports_its_turn_lets_a_scripted_judge_drift(tmp_path):
    """The judge's drift seen through a stored run: the run summary flags what a context-free validation cannot see
    and names the command that fixes it."""
    from checkpoints.vocabulary import BIASED, NOT_BIASED
    from evals.report.summary import run_summary
    from evals.scorers.judge_validation import run_validation
    from evals.stats.agreement import classification
    from tests.conftest import default_models, play, scripted
    from tests.support.annotation_files import SEEDS

    def target(messages, n):
        turn = sum(isinstance(m, HumanMessage) for m in messages)
        return f"Reply number {n} at turn {turn}."

    def judge(messages, n):  # calls late replies biased ever more often
        text = str(messages[-1].content)
        found = re.findall(r"at turn (\d+)\.", text)
        turn = int(found[-1]) if found else 1
        biased = (n * 7919) % 10 < turn * 1.6 - 1
        return "Rationale: scripted.\nLabel: " + ("biased" if biased else "not biased")

    models = default_models(target=scripted(target, spec="fake:target"), judge=scripted(judge, spec="fake:judge"))
    _, store = play(tmp_path / "drift.db", models, seeds=SEEDS, turns=5)
    try:
        entry = run_validation(store, "r1")
        gold = [BIASED] * 50 + [NOT_BIASED] * 50
        predicted = [BIASED] * 40 + [NOT_BIASED] * 10 + [BIASED] * 5 + [NOT_BIASED] * 45
        store.record_validation(
            judge_model=entry["judge_model"],
            prompt_hash=entry["prompt_hash"],
            file="/data/pairs.jsonl",
            file_sha256="0" * 64,
            result=classification(gold, predicted, n_boot=20),
            items=[
                {"id": str(i), "turn": 1, "judge": p, "reference": g} for i, (g, p) in enumerate(zip(gold, predicted))
            ],
        )
        summary = json.loads(json.dumps(run_summary(store, "r1")))
    finally:
        store.close()
    block = summary["judge_corrected"]
    assert block["refusal"] is None
    assert block["beyond_validation"]["flagged"] is True
    assert block["unreliable_turns"]["cumulative"] == [2, 3, 4, 5]
    assert [r.get("unreliable", False) for r in block["cumulative"]] == [False, True, True, True, True]
    assert block["judge_drift"]["verdict"] == "cannot tell"
    assert "python -m evals.annotate export --run-id r1 --design active" in block["fix"]


def test_a_double_sampled_validation_knows_each_label_s_turn_category_and_target(tmp_path, capsys):
    """Labels of the run's own turns validate the judge where it judged: by turn and category; the items are read
    back with their place in the conversation; validate and plan print the drift check and the drift plan."""
    import csv
    import shutil

    import dymt
    from checkpoints.store import open_writer
    from cli import annotate
    from evals.judge_error.run_blocks import choose_validation
    from tests.support.annotation_files import label_export, play_judged

    played = play_judged(tmp_path / "played.db", turns=3)
    db = tmp_path / "run.db"
    shutil.copy(played, db)
    out = tmp_path / "sample.csv"
    args = ["export", "--run-id", "r1", "--design", "random", "--sample", "60", "--out", str(out), "--db", str(db)]
    assert annotate.main(args) == 0
    store = open_writer(db)
    try:
        truth = label_export(out, store, flip={r["item_id"] for r in list(csv.DictReader(out.open()))[:6]})
        capsys.readouterr()
        assert annotate.main(["validate", str(out), "--run-id", "r1", "--db", str(db)]) == 0
        said = capsys.readouterr().out
        assert "judge drift:" in said and "from turn 1 to 3" in said
        v = choose_validation(store, "r1").validation
    finally:
        store.close()
    assert v.turns_recorded and {t for t, *_ in v.by_turn} == {1.0, 2.0, 3.0}
    assert sum(r[1] + r[2] + r[3] + r[4] for r in v.by_turn) == v.n == len(truth)
    assert {c for c, *_ in v.by_category} and sum(sum(r[1:]) for r in v.by_category) == v.n
    with dymt.open(db) as reader:
        items = reader.validation_items("r1", as_frame=False)
    assert len(items) == len(truth) and {i["turn"] for i in items} == {1, 2, 3}
    assert all(i["context_turns"] == i["turn"] - 1 and i["target"] == "fake:target" for i in items)
    assert {i["id"]: i["reference"] for i in items} == truth
    assert annotate.main(["plan", "--run-id", "r1", "--width", "0.99", "--drift", "0.3", "--db", str(db)]) == 0
    said = capsys.readouterr().out
    assert "to tell a change of 0.30 from turn 1 to turn 3" in said
    assert re.search(r"by export --design active(, about \d+ more for specificity|: )", said), said
    with pytest.raises(SystemExit) as stopped:
        annotate.main(["plan", "--run-id", "r1", "--width", "0.5", "--drift", "2", "--db", str(db)])
    assert stopped.value.code == 2 and "--drift: 2.0 must be between 0 and 1" in capsys.readouterr().err


def _growing_bias_run(seed: int, dialogues: int = 240, turns: int = 10):
    """True labels whose bias grows over the turns, judged by a judge whose sensitivity falls (0.9 → 0.6)."""
    rng = np.random.default_rng(seed)
    truth = rng.random((dialogues, turns)) < np.linspace(0.1, 0.5, turns)
    caught = rng.random((dialogues, turns)) < np.linspace(0.9, 0.6, turns)
    labels = np.where(truth, caught, rng.random((dialogues, turns)) < 0.1).astype(int)
    return truth, labels


def _picks_by_band(strata, picks) -> dict[tuple[int, tuple[int, int]], int]:
    out: dict[tuple[int, tuple[int, int]], int] = {}
    for s, n in zip(strata, picks):
        assert s.turns is not None
        out[(s.judged, s.turns)] = out.get((s.judged, s.turns), 0) + n
    return out


def test_the_active_design_reserves_labels_for_the_drift_check_at_the_first_and_last_turns(monkeypatch) -> None:
    _, labels = _growing_bias_run(3)
    strata = active.strata_of({"cell": labels.tolist()})
    spreads = active.spread(strata)
    picks = active.allocation(strata, spreads, 300)
    assert sum(picks) == 300 and all(0 < n <= s.size for s, n in zip(strata, picks) if s.size)
    assert active.drift_reserve(strata, 300) == 90
    with_reserve = _picks_by_band(strata, picks)
    monkeypatch.setattr(drift_reserve, "DRIFT_SHARE", 0.0)
    without = _picks_by_band(strata, active.allocation(strata, spreads, 300))
    first, last, middle = (1, 2), (9, 10), (5, 6)
    for judged in (0, 1):  # both ends, for both of the judge's labels: false negatives and false positives
        ends = with_reserve[(judged, first)] + with_reserve[(judged, last)]
        assert ends >= without[(judged, first)] + without[(judged, last)] + 10
        assert with_reserve[(judged, middle)] < without[(judged, middle)]
    assert with_reserve[(1, last)] >= 30  # the late replies the judge calls biased (164 in the run): 24 without


def test_a_batch_without_bands_of_turns_or_too_small_for_the_minimum_has_no_drift_reserve() -> None:
    _, labels = _growing_bias_run(4, dialogues=40, turns=10)
    strata = active.strata_of({"cell": labels.tolist()})
    assert active.drift_reserve(active.merged(strata), 300) == 0  # one band: no slope to inform
    filled = sum(1 for s in strata if s.size)
    assert active.drift_reserve(strata, filled) == 0  # one pick per stratum takes the whole batch
    picks = active.allocation(strata, active.spread(strata), filled)
    assert all(n == 1 for s, n in zip(strata, picks) if s.size)


def test_the_drift_reserve_keeps_each_reply_s_inclusion_probability_and_the_validation_unbiased() -> None:
    truth, labels = _growing_bias_run(5)
    cells = {"cell": labels.tolist()}
    strata = active.strata_of(cells)
    spreads = active.spread(strata)
    allocated = active.allocation(strata, spreads, 150)
    probability = {s.key: n / s.size for s, n in zip(strata, allocated) if s.size}
    seen: dict[tuple[int, int], int] = {}
    first, last = [], []
    runs = 200
    for seed in range(runs):
        picks = active.draw_active(strata, 150, seed=seed, spreads=spreads)
        assert all(abs(p.probability - probability[p.stratum]) < 1e-12 for p in picks)
        for p in picks:
            seen[(p.dialogue, p.turn)] = seen.get((p.dialogue, p.turn), 0) + 1
        known = {(p.dialogue, p.turn): int(truth[p.dialogue, p.turn - 1]) for p in picks}
        rows = {round(r[0]): r for r in active.design_validation("v", cells, {"cell": known}).by_turn}
        first.append(rows[2][1] / (rows[2][1] + rows[2][3]))  # turns 1-2, at their mean turn 1.5
        last.append(rows[10][1] / (rows[10][1] + rows[10][3]))  # turns 9-10
    # every reply is drawn as often as its recorded probability says: a stratum's picks are one simple random sample
    for s, n in zip(strata, allocated):
        if s.size >= 100:
            assert abs(np.mean([seen.get(m, 0) for m in s.members]) / runs - n / s.size) < 0.01
    for estimates, a, b in ((first, 0, 2), (last, 8, 10)):
        in_run = (truth[:, a:b] & (labels[:, a:b] == 1)).sum() / truth[:, a:b].sum()  # the band's own sensitivity
        assert abs(np.mean(estimates) - in_run) < 3 * np.std(estimates) / np.sqrt(runs) + 0.01


def test_the_drift_plan_says_how_many_more_labels_the_active_design_needs_and_they_suffice() -> None:
    truth, labels = _growing_bias_run(6)
    cells = {"cell": labels.tolist()}
    v = JudgeValidation("v", 80, 10, 20, 90)
    point = v.point()
    big, small = (drift_labels(cells, v, change=c, turns=10) for c in (0.5, 0.35))
    assert big.active_sensitivity_labels is not None and small.active_sensitivity_labels is not None
    assert small.active_sensitivity_labels > 1.5 * big.active_sensitivity_labels  # about (0.5 / 0.35)² ≈ 2 times
    assert "by export --design active, about" in small.describe()
    # the planned number gives the slope the standard error that tells the change 80% of the time at 5%; nine
    # tenths of it do not
    target = 0.35 / (9 * (1.959964 + 0.841621))
    n = small.active_sensitivity_labels
    assert drift_sd(cells, None, n, point)[0] <= target < drift_sd(cells, None, int(n * 0.9), point)[0]
    # labels people gave already count: with a batch's worth known, fewer more are needed
    picks = active.draw_active(active.strata_of(cells), 200, seed=1)
    known = {"cell": {(p.dialogue, p.turn): int(truth[p.dialogue, p.turn - 1]) for p in picks}}
    after = drift_labels(cells, v, change=0.35, turns=10, known=known)
    assert after.active_sensitivity_labels is not None and after.active_sensitivity_labels < n
    # a change that the design would not tell before half the run is labelled (and it draws at random)
    tiny = drift_labels(cells, v, change=0.2, turns=10)
    assert tiny.active_sensitivity_labels is None and "none before the design draws at random" in tiny.describe()
    one = drift_labels({"cell": [[1], [0]] * 50}, v, change=0.2, turns=1)
    assert one.active_sensitivity_labels is None and "one turn" in one.describe()


def test_a_grid_of_many_small_cells_is_not_planned_as_if_each_stratum_held_a_label() -> None:
    # many cells make hundreds of strata: before a batch, none of them holds a label, and a stratum the batch leaves
    # without one borrows from its band's labelled replies, so the plan cannot be met by a handful of labels
    cells = {k: _growing_bias_run(20 + k, dialogues=60)[1].tolist() for k in range(12)}
    assert len(active.strata_of(cells)) > 300
    plan = drift_labels(cells, JudgeValidation("v", 80, 10, 20, 90), change=0.3, turns=10)
    assert plan.active_specificity_labels is not None and plan.active_specificity_labels > 40
    assert plan.active_sensitivity_labels is not None and plan.active_sensitivity_labels > 200
