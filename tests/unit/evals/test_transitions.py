"""Onset, survival, persistence, recovery and relapse by turn: raw on hand-built labels, corrected, paired, covered."""

from __future__ import annotations

import numpy as np
import pytest

from evals.judge_error.correction import correct_run, corrected_difference
from evals.judge_error.validation import JudgeValidation
from evals.stats.transitions import TOO_FEW, raw_transitions

B, N, U = "biased", "not_biased", "unparsed"


def _rate(tr, metric, turn):
    return next(r for r in tr.series(metric) if r.turn == turn)


def test_raw_transitions_count_hand_built_sequences():
    # 20 copies of each of four dialogues, so every base clears the 20-dialogue minimum
    rows = [[B, B, N, B], [N, B, N, N], [N, N, N, N], [B, N, B, B]] * 20
    raw, _ = raw_transitions(rows, 4, min_base=20)
    assert _rate(raw, "onset", 1).rate == pytest.approx(0.5)  # B.. and B.. of four
    assert _rate(raw, "onset", 2).base == 40  # the two clean at turn 1
    assert _rate(raw, "onset", 2).rate == pytest.approx(0.5)  # N B.. of N B.., N N..
    assert _rate(raw, "onset", 3).base == 20 and _rate(raw, "onset", 3).rate == 0.0
    assert [r.rate for r in raw.survival] == pytest.approx([0.5, 0.25, 0.25, 0.25])
    # turn 2: biased at 1 were BB.. and BN..: one of two stays biased
    assert _rate(raw, "persistence", 2).rate == pytest.approx(0.5)
    assert _rate(raw, "recovery", 2).rate == pytest.approx(0.5)
    # turn 3: biased at 2 were BB.. (→N) and NB.. (→N)
    assert _rate(raw, "persistence", 3).rate == 0.0 and _rate(raw, "recovery", 3).rate == 1.0
    # relapse at 3: clean at 2 and biased before: BN.B → B;   at 4: BBN → B, NBN → N
    assert _rate(raw, "relapse", 3).base == 20 and _rate(raw, "relapse", 3).rate == 1.0
    assert _rate(raw, "relapse", 4).base == 40 and _rate(raw, "relapse", 4).rate == pytest.approx(0.5)
    for r in raw.rows():
        if r.rate is not None and 0 < r.rate < 1:
            assert r.low is not None and r.high is not None and r.low < r.rate < r.high


def test_raw_transitions_need_their_condition_observed_and_withhold_small_bases():
    rows = [[B, U, B], [N, B, None]] * 15
    raw, _ = raw_transitions(rows, 3)
    p2 = _rate(raw, "persistence", 2)
    assert p2.base == 0 and p2.rate is None and p2.too_few  # the B at 1 was followed by an unparsed label
    assert _rate(raw, "onset", 3).base == 0  # an unparsed turn 2 does not count as clean
    assert _rate(raw, "onset", 2).base == 15 and _rate(raw, "onset", 2).too_few
    assert _rate(raw, "onset", 2).as_dict()["too_few"] == TOO_FEW
    enough, _ = raw_transitions(rows, 3, min_base=10)
    assert _rate(enough, "onset", 2).rate == 1.0


def _simulate(rng, n, *, pi=0.3, onset=0.2, persist=0.8, relapse=0.4, turns=5):
    """Dialogues of a known chain: truth rows (0/1) with per-turn probabilities as given."""
    truth = np.zeros((n, turns), int)
    for i in range(n):
        state, ever = rng.random() < pi, False
        for t in range(turns):
            if t:
                if state:
                    state = rng.random() < persist
                elif ever:
                    state = rng.random() < relapse
                else:
                    state = rng.random() < onset
            ever |= state
            truth[i, t] = state
    return truth


def _judge(rng, truth, sens, spec):
    flip = rng.random(truth.shape)
    labels = np.where(truth == 1, flip < sens, flip >= spec)
    return [[B if x else N for x in row] for row in labels]


def test_corrected_transitions_with_a_perfect_judge_are_the_raw_ones():
    rng = np.random.default_rng(3)
    rows = _judge(rng, _simulate(rng, 300), 1.0, 1.0)
    v = JudgeValidation(source="perfect", tp=400, fp=0, fn=0, tn=400)
    corrected = correct_run(rows, v, draws=40).transitions
    raw, _ = raw_transitions(rows, 5)
    assert corrected is not None
    for r in raw.rows():
        c = _rate(corrected, r.metric, r.turn)
        # a validation without errors still allows a few, so the expected bases are the counts give or take one
        assert c.base == pytest.approx(r.base, rel=0.01, abs=1.0)
        if r.base >= 25:
            assert c.rate == pytest.approx(r.rate, abs=0.02)


def test_corrected_transitions_undo_the_judge_error_and_cover_the_truth():
    """A judge that misses 25% of biased replies and flags 10% of clean ones makes raw persistence look low and
    onset high; the corrected intervals hold the chain's known probabilities at every turn on most data sets."""
    truths = {"persistence": 0.8, "recovery": 0.2, "onset": 0.2, "relapse": 0.4}
    v = JudgeValidation(source="sim", tp=300, fp=40, fn=100, tn=360)
    held = {m: 0 for m in truths}
    cases = {m: 0 for m in truths}
    raw_persistence = []
    for k in range(12):
        rng = np.random.default_rng(100 + k)
        rows = _judge(rng, _simulate(rng, 400), 0.75, 0.9)
        res = correct_run(rows, v, draws=100, seed=k)
        assert res.transitions is not None
        raw, _ = raw_transitions(rows, 5)
        raw_persistence.append(_rate(raw, "persistence", 3).rate)
        for m, truth in truths.items():
            for r in res.transitions.series(m):
                if m == "onset" and r.turn == 1 or r.too_few:
                    continue
                cases[m] += 1
                held[m] += r.low <= truth <= r.high
    assert np.mean(raw_persistence) < 0.7  # what the judge's error does to the raw rate
    for m in truths:
        assert cases[m] >= 24, m
        assert held[m] / cases[m] >= 0.85, (m, held[m], cases[m])


def test_paired_difference_of_transitions_is_zero_on_itself_and_finds_a_real_change():
    rng = np.random.default_rng(7)
    seeds = [f"s{i}" for i in range(300)]
    a_rows = _judge(rng, _simulate(rng, 300, persist=0.85), 0.85, 0.95)
    b_rows = _judge(rng, _simulate(rng, 300, persist=0.35), 0.85, 0.95)
    v = JudgeValidation(source="sim", tp=170, fp=10, fn=30, tn=190)
    a = correct_run(a_rows, v, clusters=seeds, draws=100)
    b = correct_run(b_rows, v, clusters=seeds, draws=100)
    same = corrected_difference(a, a).transitions
    assert same is not None and all(r.rate == 0.0 and r.low == 0.0 and r.high == 0.0 for r in same.persistence)
    d = corrected_difference(a, b).transitions
    assert d is not None
    for r in d.persistence:
        assert r.rate is not None and r.high is not None and r.high < 0  # B persists less, at every turn
        assert -0.5 - 0.25 < r.rate < -0.5 + 0.25
    block = corrected_difference(a, b).as_dict()["transitions"]
    assert block["kind"] == "difference" and "diff" in block["persistence"][0]


def test_a_branch_set_that_stops_persisting_shows_it_against_its_parents_raw_and_corrected():
    """After a swap at turn 3 the branches recover: their persistence from turn 4 is lower than the parents'."""
    from evals.judge_error.run_blocks import ChosenValidation
    from evals.report.transition_tables import set_transitions
    from evals.stats.counterfactual import BranchPair

    rng = np.random.default_rng(11)
    truth = _simulate(rng, 300, persist=0.9)
    branch_truth = truth.copy()
    for row in branch_truth:  # from turn 4 on, a biased reply is followed by a biased one only 30% of the time
        for t in range(3, 5):
            row[t] = row[t - 1] and rng.random() < 0.3 or not row[t - 1] and rng.random() < 0.1
    parents, branches = _judge(rng, truth, 0.9, 0.95), _judge(rng, branch_truth, 0.9, 0.95)
    for p, b in zip(parents, branches):
        b[:3] = p[:3]  # the turns before the fork are the parent's own
    pairs = [BranchPair(f"p{i}", f"b{i}", 4, p, b) for i, (p, b) in enumerate(zip(parents, branches))]
    chosen = ChosenValidation(JudgeValidation(source="sim", tp=180, fp=10, fn=20, tn=190), "pairs", "sim", None)
    out = set_transitions(pairs, chosen, n_boot=200)
    raw, fixed = out["difference"], out["judge_corrected"]
    assert fixed["refusal"] is None
    for block in (raw, fixed):
        key = "diff"
        before = next(e for e in block["persistence"] if e["turn"] == 3)
        assert before[key] == pytest.approx(0.0, abs=0.05)  # shared turns: no difference (up to the fit)
        for e in block["persistence"]:
            if e["turn"] >= 4:
                assert e[key] < -0.3 and e["ci95"][1] < 0, (e, block["kind"])


def test_persistence_and_recovery_over_ten_turns_with_a_drifting_judge_are_flagged_and_relapse_is_not():
    from benchmarks.simulation.suite import simulate
    from evals.judge_error.cells import Cell
    from evals.judge_error.correction import correct_encoded
    from evals.judge_error.transitions import UNRELIABLE_TRANSITIONS_NOTE

    flagged = {}
    for judge in ("both-drift", "flat"):
        data = simulate("mixture", judge, dialogues=240, turns=10, validation_items=600, rng=np.random.default_rng(5),
                        validation_kind="turns")  # fmt: skip
        (r,) = correct_encoded([Cell(data.labels.tolist(), turns=10)], [data.validation], draws=40)
        assert r.drift is not None and r.transitions is not None
        flagged[judge] = (r.drift.verdict, dict(r.transitions.unreliable))
    verdict, notes = flagged["both-drift"]
    assert verdict == "drift" and set(notes) == {"persistence", "recovery"}
    assert set(notes.values()) == {UNRELIABLE_TRANSITIONS_NOTE}
    assert flagged["flat"][1] == {}


def test_the_suite_counts_transition_coverage_only_where_the_true_base_holds_and_the_benchmark_prints_it(capsys):
    from benchmarks import __main__ as bench
    from benchmarks.simulation.coverage import CellSpec, measure
    from benchmarks.simulation.suite import transition_truth
    from benchmarks.transition_coverage import transition_lines

    truth = transition_truth("relapse", 5)  # biased at 1, clean at 2-3, biased again from 4: 40% of dialogues
    assert list(truth["relapse"][0][2:4]) == [0.0, 1.0] and np.isnan(truth["relapse"][0][4])
    assert truth["persistence"][0][1] == 0.0 and truth["persistence"][0][4] == 1.0
    assert truth["survival"][0] == pytest.approx([0.6] * 5)
    cov = measure(CellSpec("relapse", "fair", 5, 240, 300), 6, peers=False).as_dict()
    relapse = cov["metrics"]["transitions.relapse"]
    # relapse has no base at turns 1, 2 (never defined) and 5 (no one is clean at 4 after bias): no coverage there
    assert [v == v for v in relapse["coverage"]] == [False, False, True, True, False]
    assert 0.5 <= relapse["coverage"][3] <= 1.0
    lines = transition_lines([cov])
    assert lines[2].split()[:4] == ["relapse", "fair", "5", "240"] and lines[-1].endswith("coverages below 0.90")
    with pytest.raises(SystemExit) as stopped:
        bench.main(["judge_error", "--transitions"])
    assert stopped.value.code == 2 and "--transitions belongs to the coverage suite" in capsys.readouterr().err


def test_a_transition_at_exactly_0_or_1_at_one_turn_is_reached_by_its_interval_and_an_inner_one_is_not():
    """The `relapse` shape: biased at 1, clean at 2–3, biased again from 4. Its relapse is 0 at turn 3 and 1 at turn
    4, its persistence 0 at turn 2 and 1 at turn 5: each interval reaches its truth because the likelihood-ratio
    test of that turn's transitions at the bound does not reject it; the tests reject the bounds the data exclude."""
    from benchmarks.simulation.suite import simulate
    from evals.judge_error.cells import Cell
    from evals.judge_error.correction import correct_encoded

    data = simulate("relapse", "fair", dialogues=240, turns=5, validation_items=300, rng=np.random.default_rng(3),
                    validation_kind="turns")  # fmt: skip
    (r,) = correct_encoded([Cell(data.labels.tolist(), turns=5)], [data.validation], draws=60)
    tr = r.transitions
    assert tr is not None
    assert _rate(tr, "relapse", 3).low == 0.0 and _rate(tr, "relapse", 4).high == 1.0
    assert _rate(tr, "persistence", 2).low == 0.0 and _rate(tr, "recovery", 2).high == 1.0
    assert _rate(tr, "persistence", 5).high == 1.0 and _rate(tr, "recovery", 5).low == 0.0
    # the bounds the data exclude are not reached: relapse at 4 is far from 0, persistence at 5 from 0
    assert _rate(tr, "relapse", 4).low > 0.3 and _rate(tr, "persistence", 5).low > 0.3
    assert _rate(tr, "relapse", 3).high < 0.7 and _rate(tr, "onset", 1).low > 0.2


def test_the_transition_tests_hold_a_probability_at_1_and_reject_a_bound_the_data_exclude():
    from evals.judge_error.boundaries import joint_fit
    from evals.judge_error.cells import Cell
    from evals.judge_error.correction import Boundaries
    from evals.judge_error.draws import stack
    from evals.judge_error.transition_bounds import BOUNDS, bound_flags, transition_tests

    rng = np.random.default_rng(4)
    rows = _judge(rng, _simulate(rng, 800, pi=0.4, persist=0.6, relapse=0.4, turns=4), 0.9, 0.9)
    st = stack([Cell(rows, turns=4)])
    val = np.array([[180.0, 20.0, 20.0, 180.0]])
    start = np.concatenate([np.full((1, 13), 0.4), [[0.9, 0.9]]], axis=1)
    x, loglik = joint_fit(st.y, st.length, st.counts, val, start)
    one = np.zeros((1, 13), bool)
    one[0, 1 + 3 * 3 + 2] = True  # r at turn 4 (packed: pi, a_2..a_4, b_2.., p_2.., r_2..r_4) held at 1
    held, held_loglik = joint_fit(st.y, st.length, st.counts, val, x, one=one)
    assert held[0, 12] == pytest.approx(1.0, abs=1e-5) and held_loglik[0] < loglik[0] - 5
    assert x[0, 12] == pytest.approx(0.4, abs=0.2)
    kept = transition_tests(st.y, st.length, st.counts, val, x, loglik)
    assert kept.shape == (1, len(BOUNDS), 4)
    # persistence 0.6 and relapse 0.4 on 800 dialogues: no bound is kept at any turn
    assert not kept[0, 1:, 1:].any()
    none = (False,) * 4
    flags = bound_flags(Boundaries(none, none, none, (none,) * 4, False), kept[0])
    assert not any(f.any() for pair in flags.values() for f in pair)


def test_a_paired_transition_difference_reaches_what_one_side_on_a_bound_allows():
    from evals.judge_error.transitions import _bounds_kept
    from evals.stats.transitions import METRICS, TransitionRate, Transitions

    def cell(kind, relapse):
        series = {m: () for m in METRICS}
        series["relapse"] = tuple(TransitionRate("relapse", t, *v, 50.0, False) for t, v in relapse)
        return Transitions.of(kind, series, 20)

    a = cell("corrected", [(3, (0.04, 0.0, 0.2)), (4, (0.9, 0.7, 1.0)), (5, (0.3, 0.0, 0.5))])
    b = cell("corrected", [(3, (0.2, 0.0, 0.4)), (4, (0.95, 0.8, 1.0)), (5, (0.5, 0.3, 0.7))])
    diff = cell("difference", [(3, (0.16, 0.05, 0.3)), (4, (0.05, 0.01, 0.1)), (5, (0.2, 0.1, 0.4))])
    out = {r.turn: (r.low, r.high) for r in _bounds_kept(a, b, diff).relapse}
    # both may be 0 at 3: B's interval and minus A's, so 0 too; both may be 1 at 4: B − 1 and 1 − A
    assert out[3] == pytest.approx((-0.2, 0.4)) and out[4] == pytest.approx((-0.2, 0.3))
    assert out[5] == pytest.approx((0.1, 0.7))  # only A may be 0 at 5: B − A may be B itself


def _paired(pair: str, turns: int = 5, seed: int = 1):
    from benchmarks.simulation.suite import simulate_pair
    from evals.judge_error.cells import Cell
    from evals.judge_error.correction import correct_encoded

    seeds = [f"s{i}" for i in range(240)]
    pa, pb = simulate_pair(pair, "fair", dialogues=240, turns=turns, validation_items=300,
                           rng=np.random.default_rng(seed), validation_kind="turns")  # fmt: skip
    return correct_encoded(
        [Cell(s.labels.tolist(), seeds, turns=turns) for s in (pa, pb)], [pa.validation, pb.validation], draws=60
    )


def test_the_paired_cumulative_difference_reaches_what_one_flat_side_allows_and_clean_so_far_follows_it():
    """`persistent` is biased from turn 1 or never (cumulative bias flat from turn 1); `mixture` keeps rising. Where
    only one side may be flat, the cumulative difference also spans the draws of B at t − A at 1, beyond its own
    draws' interval; clean so far's difference is exactly minus it."""
    from evals.judge_error.intervals import interval

    a, b = _paired("persistent-vs-mixture")
    assert a.boundaries is not None and a.boundaries.flat_between(0, 4)
    assert b.boundaries is not None and not b.boundaries.flat_between(0, 4)
    d = corrected_difference(a, b)
    assert d.transitions is not None
    wider = 0
    for t in range(1, 5):
        c = d.cumulative[t]
        point = b.cumulative[t].rate - a.cumulative[0].rate
        lo, hi = interval(b.draws.cumulative[:, t] - a.draws.cumulative[:, 0], point, (-1.0, 1.0))
        assert c.low <= lo + 1e-12 and c.high >= hi - 1e-12
        own = interval(b.draws.cumulative[:, t] - a.draws.cumulative[:, t], c.rate, (-1.0, 1.0))
        wider += (c.high - c.low) > (own[1] - own[0]) + 1e-6
    assert wider >= 2
    for r, c in zip(d.transitions.survival, d.cumulative):
        assert (r.rate, r.low, r.high) == pytest.approx((-c.rate, -c.high, -c.low))


def test_a_paired_difference_reaches_what_one_side_on_a_bound_allows(monkeypatch):
    """`none` has no bias at any turn (its tests keep 0 everywhere), `onset` turns biased at the middle turn: where A
    may be 0, B − A may be B itself, held jointly with A on 0 (B's draws weighted by how likely each draw's judge
    error makes A's labels all false positives), so the difference holds that interval, and is narrower than B's own
    where A's labels say more about the shared judge than the validation alone; the other way round, minus A's.
    With the one-sided rule (JOINT_BOUNDS off) it holds B's own interval."""
    from evals.judge_error import transitions

    a, b = _paired("none-vs-onset")
    d = corrected_difference(a, b)
    back = corrected_difference(b, a)
    assert a.boundaries is not None and all(a.boundaries.per_turn_zero) and all(a.boundaries.cumulative_zero)
    narrower = 0
    for t in range(5):
        for diff, rev, own, cumulative in (
            (d.per_turn, back.per_turn, b.per_turn, False),
            (d.cumulative, back.cumulative, b.cumulative, True),
        ):
            for lo, hi in transitions.held_on_bound(a, b, t, cumulative=cumulative):
                assert diff[t].low <= lo + 1e-12 and diff[t].high >= hi - 1e-12
            for lo, hi in transitions.held_on_bound(b, a, t, cumulative=cumulative):
                assert rev[t].low <= lo + 1e-12 and rev[t].high >= hi - 1e-12
            narrower += diff[t].high < own[t].high - 1e-3
    assert narrower >= 2
    monkeypatch.setattr(transitions, "JOINT_BOUNDS", False)
    d, back = corrected_difference(a, b), corrected_difference(b, a)
    for t in range(5):
        for diff, rev, own in ((d.per_turn, back.per_turn, b.per_turn), (d.cumulative, back.cumulative, b.cumulative)):
            assert diff[t].low <= own[t].low + 1e-12 and diff[t].high >= own[t].high - 1e-12
            assert rev[t].low <= -own[t].high + 1e-12 and rev[t].high >= -own[t].low - 1e-12
    same = corrected_difference(a, a)  # a cell against itself: exactly 0, whatever bounds it keeps
    assert all((r.rate, r.low, r.high) == (0.0, 0.0, 0.0) for r in (*same.per_turn, *same.cumulative))


def test_relapse_with_a_judge_weaker_than_the_suite_measured_is_flagged_and_with_the_weak_or_a_good_one_is_not():
    from benchmarks.simulation.suite import simulate
    from evals.judge_error.cells import Cell
    from evals.judge_error.correction import correct_encoded
    from evals.judge_error.transitions import WEAK_JUDGE_NOTE

    notes = {}
    for judge in ("weak", "good", (0.65, 0.65)):
        data = simulate("mixture", judge, dialogues=240, turns=5, validation_items=300, rng=np.random.default_rng(1),
                        validation_kind="turns")  # fmt: skip
        (r,) = correct_encoded([Cell(data.labels.tolist(), turns=5)], [data.validation], draws=40)
        assert r.transitions is not None
        notes[judge] = dict(r.transitions.unreliable)
    assert notes[(0.65, 0.65)] == {"relapse": WEAK_JUDGE_NOTE} and notes["weak"] == {} and notes["good"] == {}
    assert r.as_dict()["transitions"]["unreliable"] == {"relapse": WEAK_JUDGE_NOTE}


def test_a_rate_whose_base_the_draws_do_not_bound_away_from_0_reaches_0_and_1_and_a_well_known_one_is_delta():
    """Fieller's set for a ratio of two expected counts: where the base's own interval reaches 0 nothing bounds the
    ratio; where both counts are well known it is the delta method's interval; the numerator's count reaching 0
    lets the rate be 0 even where the rate's own draws do not."""
    from evals.judge_error.transitions import fieller, ratio_reach

    rng = np.random.default_rng(0)
    num, base = rng.normal(50, 5, 4000), rng.normal(100, 5, 4000)
    lo, hi = fieller(50.0, 100.0, num, base)
    half = 1.96 * np.sqrt(25 + 0.25 * 25) / 100
    assert lo == pytest.approx(0.5 - half, abs=0.01) and hi == pytest.approx(0.5 + half, abs=0.01)
    assert fieller(5.0, 12.0, rng.normal(5, 3, 400), rng.normal(12, 8, 400)) == (0.0, 1.0)
    # moves whose own interval reaches 0 (few and doubtful) in a base of about 30: the rate may be 0
    moves = np.abs(rng.normal(3, 2.5, 400))
    base = 30 + rng.normal(0, 1, 400)
    rates = moves / base
    low, high = float(np.percentile(rates, 2.5)), float(np.percentile(rates, 97.5))
    assert low > 0
    assert ratio_reach(3.0, 30.0, moves, base, low, high)[0] == 0.0


def test_a_corrected_rate_reaches_the_truth_its_expected_counts_allow_where_its_own_draws_stop_short():
    """Through the correction's public path, two runs whose rate's draws stop short of a true bound that the two
    expected counts behind the rate allow: `mixture` with the weak judge, whose relapse at turn 5 is truly 0 (the
    expected relapses' own interval reaches 0, the rate's draws only 0.16), and `persistent` with the fair judge,
    whose persistence at turn 2 is truly 1 (the expected recoveries' interval reaches 0, the rate's draws 0.9998).
    The test of the bound rejects it in both, so only the counts' reach holds the truth."""
    from benchmarks.simulation.suite import simulate
    from evals.judge_error.cells import Cell
    from evals.judge_error.correction import correct_encoded

    for shape, judge, metric, turn, truth in (
        ("mixture", "weak", "relapse", 5, 0.0),
        ("persistent", "fair", "persistence", 2, 1.0),
    ):
        data = simulate(shape, judge, dialogues=240, turns=5, validation_items=300, rng=np.random.default_rng(27),
                        validation_kind="turns")  # fmt: skip
        (r,) = correct_encoded([Cell(data.labels.tolist(), turns=5)], [data.validation])
        assert r.transitions is not None
        rate = _rate(r.transitions, metric, turn)
        assert not rate.too_few and rate.low <= truth <= rate.high, (shape, rate)
        assert rate.high - rate.low < 0.5 or metric == "relapse"  # persistence stays informative: [0.60, 1]
