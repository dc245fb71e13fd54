"""The active labelling design: strata, Neyman allocation, known inclusion probabilities, the design-weighted
validation."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from benchmarks.simulation.labelling_designs import compare_designs
from cli import annotate, common
from evals.judge_error import drift_reserve
from evals.judge_error.active_design import (
    allocate,
    allocation,
    design_validation,
    draw_active,
    merged,
    minimum_for,
    parse_pick,
    strata_of,
)
from evals.judge_error.double_sampling import annotation_counts, human_labels
from evals.judge_error.run_blocks import choose_validation
from tests.support.annotation_files import copy_run, label_export, play_judged, record_pairs


def _cells(seed: int = 0, dialogues: int = 60, turns: int = 5) -> tuple[dict, np.ndarray]:
    """A cell whose judged-biased replies concentrate in some dialogues (so the strata differ), and its truth."""
    rng = np.random.default_rng(seed)
    prone = rng.random(dialogues) < 0.3
    truth = np.where(prone[:, None], rng.random((dialogues, turns)) < 0.7, rng.random((dialogues, turns)) < 0.05)
    judged = np.where(truth, rng.random(truth.shape) < 0.8, rng.random(truth.shape) < 0.2).astype(int)
    return {"cell": judged.tolist()}, truth


def test_strata_split_judged_replies_by_label_dialogue_group_and_turn():
    cells = {("t", "implicit"): [[1, 0, 0], [1, 1, 0], [1, 1, 1], [0, 0, None]]}
    strata = {s.name: s for s in strata_of(cells)}
    assert set(strata) == {
        "t·implicit/b/k1/t1",
        "t·implicit/b/k2/t1",
        "t·implicit/b/k2/t2",
        "t·implicit/b/k3+/t1",
        "t·implicit/b/k3+/t2",
        "t·implicit/b/k3+/t3",
        "t·implicit/nb/k0/t1",
        "t·implicit/nb/k0/t2",
        "t·implicit/nb/k1+/t2",
        "t·implicit/nb/k1+/t3",
    }
    assert strata["t·implicit/b/k1/t1"].members == ((0, 1),)
    assert strata["t·implicit/nb/k0/t1"].members == ((3, 1),)  # the unparsed third turn is in no stratum
    assert strata["t·implicit/nb/k1+/t3"].members == ((0, 3), (1, 3))
    assert strata["t·implicit/nb/k1+/t3"].parent == (("t", "implicit"), 0, "k1+")
    assert sum(s.size for s in strata.values()) == 11
    assert strata["t·implicit/b/k2/t2"].relevance == 0.5


def test_a_long_run_s_turns_fall_in_at_most_five_bands():
    rows = [[1, 0] * 5, [0] * 10, [0] * 7 + [None] * 3]
    strata = strata_of({"c": rows})
    assert {s.turns for s in strata if s.group == "k0"} == {(1, 2), (3, 4), (5, 6), (7, 8), (9, 10)}
    assert {s.name for s in strata if s.group == "k0"} >= {"c/nb/k0/t1-2", "c/nb/k0/t9-10"}
    k0_last = next(s for s in strata if s.group == "k0" and s.turns == (7, 8))
    assert k0_last.members == ((1, 7), (1, 8), (2, 7))  # the third dialogue ends at turn 7
    # every judged reply in exactly one stratum
    members = [m for s in strata for m in s.members]
    assert len(members) == len(set(members)) == 10 + 10 + 7


def test_each_stratum_gets_two_picks_where_that_takes_half_the_batch_else_one(monkeypatch):
    monkeypatch.setattr(drift_reserve, "DRIFT_SHARE", 0.0)  # the spreads' part of a batch (the drift reserve aside)
    strata = strata_of({"c": np.where(np.random.default_rng(0).random((120, 5)) < 0.3, 1, 0).tolist()})
    filled = sum(1 for s in strata if s.size)
    assert minimum_for(4 * filled, strata) == 2 and minimum_for(4 * filled - 1, strata) == 1
    largest = max(range(len(strata)), key=lambda h: strata[h].size)
    spreads = [1e-9 if h == largest else 1.0 for h in range(len(strata))]  # nothing to learn there: its minimum
    for budget in (filled + 5, 4 * filled):
        n = allocation(strata, spreads, budget)
        assert sum(n) == budget and min(n) == n[largest] == minimum_for(budget, strata)


@pytest.mark.parametrize("budget", [5, 40, 100, 300])
def test_allocation_spends_the_budget_within_each_stratum(budget):
    sizes, spreads = [3, 50, 120, 0, 200], [0.5, 0.4, 0.05, 0.3, 0.01]
    n = allocate(sizes, spreads, budget)
    assert sum(n) == min(budget, sum(sizes))
    assert all(0 <= x <= s for x, s in zip(n, sizes))
    if budget >= 10:
        assert all(x >= min(2, s) for x, s in zip(n, sizes))
    if budget == 300:
        assert n[:4] == sizes[:4]  # strata that Neyman's share would overfill are taken whole
    elif budget >= 10:
        # Neyman: more where size × spread is larger (50·0.4 = 20 > 120·0.05 = 6 > 200·0.01 = 2)
        assert n[1] > n[2] > n[4]


def test_inclusion_probabilities_sum_to_the_budget_and_match_how_often_a_reply_is_drawn():
    cells, _ = _cells()
    strata = strata_of(cells)
    budget = 40
    picks = draw_active(strata, budget, seed=0)
    assert len(picks) == budget and len({(p.dialogue, p.turn) for p in picks}) == budget
    p_of = {}
    for s in strata:  # every reply of a stratum has its stratum's probability
        n_h = sum(1 for p in picks if p.stratum == s.key)
        for m in s.members:
            p_of[m] = n_h / s.size
    assert sum(p_of.values()) == pytest.approx(budget)
    assert all(p.probability == pytest.approx(p_of[(p.dialogue, p.turn)]) for p in picks)
    assert len(set(p_of.values())) > 2  # unequal probabilities: not a simple random sample
    runs = 1500
    seen = dict.fromkeys(p_of, 0)
    for seed in range(runs):
        for p in draw_active(strata, budget, seed=seed):
            seen[(p.dialogue, p.turn)] += 1
    for m, p in p_of.items():
        sd = np.sqrt(p * (1 - p) / runs)
        assert abs(seen[m] / runs - p) <= 4 * sd + 1e-9, (m, p, seen[m] / runs)


def test_a_further_batch_leaves_labelled_replies_out_and_records_what_validate_reads_back():
    cells, _ = _cells()
    strata = strata_of(cells)
    first = draw_active(strata, 30, seed=0)
    done = {"cell": {(p.dialogue, p.turn) for p in first}}
    second = draw_active(strata, 30, seed=1, exclude=done)
    assert not {(p.dialogue, p.turn) for p in second} & done["cell"]
    from evals.judge_error.active_design import describe_pick

    text = describe_pick(second[0], seed=1, n=30, population=270, label_set="primary")
    assert parse_pick(text) == (1, second[0].stratum, pytest.approx(second[0].probability, rel=1e-5))
    assert parse_pick("random seed=0 n=40 of 72 judged turns (primary)") is None


def test_design_weighted_sensitivity_and_specificity_are_unbiased_where_raw_counts_are_not():
    cells, truth = _cells(seed=3, dialogues=200)
    judged = np.array(cells["cell"])
    sens_true = (judged[truth] == 1).mean()
    spec_true = (judged[~truth] == 0).mean()
    strata = strata_of(cells)
    weighted, raw = [], []
    for seed in range(300):
        picks = draw_active(strata, 120, seed=seed)
        known = {(p.dialogue, p.turn): int(truth[p.dialogue, p.turn - 1]) for p in picks}
        v = design_validation("s", cells, {"cell": known})
        weighted.append((v.sensitivity, v.specificity))
        t = np.array([truth[i, k - 1] for i, k in known])
        j = np.array([judged[i, k - 1] for i, k in known])
        raw.append(((j[t] == 1).mean(), (j[~t] == 0).mean()))
    weighted, raw = np.array(weighted), np.array(raw)
    se = weighted.std(axis=0) / np.sqrt(len(weighted))
    assert abs(weighted[:, 0].mean() - sens_true) < max(4 * se[0], 0.01)
    assert abs(weighted[:, 1].mean() - spec_true) < max(4 * se[1], 0.01)
    # the sample is stratified by the judge's label: its raw shares are far off
    assert abs(raw[:, 0].mean() - sens_true) > 0.05 or abs(raw[:, 1].mean() - spec_true) > 0.05
    # its effective counts carry the estimate's spread: the Beta posterior's sd is near the estimate's
    v = design_validation(
        "s",
        cells,
        {"cell": {(p.dialogue, p.turn): int(truth[p.dialogue, p.turn - 1]) for p in draw_active(strata, 120, seed=0)}},
    )
    beta_sd = np.sqrt(v.point()[0] * (1 - v.point()[0]) / (v.tp + v.fn + 3))
    assert 0.5 < beta_sd / weighted[:, 0].std() < 2


def test_no_false_negative_found_claims_no_more_than_the_judged_unbiased_labels_can_show():
    # A one-turn episode in 480 × 10 dialogues: about one judged-unbiased reply in a hundred is truly biased, so 150
    # labels often find none of them. The estimate is then 1, and the validation's effective counts must carry
    # what the ~90 judged-unbiased labels really rule out: a share of truly biased among them up to about 3 / n
    # (the rule of three), which puts the sensitivity's one-sided 95% lower bound near a / (a + W₀·3/n).
    from scipy.stats import beta

    from benchmarks.simulation.suite import JUDGES, simulate

    data = simulate(
        "one-turn", JUDGES["fair"], dialogues=480, turns=10, validation_items=0, rng=np.random.default_rng(1)
    )
    judged = data.labels
    cells = {"cell": judged.tolist()}
    picks = draw_active(strata_of(cells), 150, seed=0)
    # the judged-unbiased labels found no bias; the judged-biased ones are the truth
    known = {
        (p.dialogue, p.turn): int(judged[p.dialogue, p.turn - 1] == 1 and data.truth[p.dialogue, p.turn - 1])
        for p in picks
    }
    v = design_validation("s", cells, {"cell": known})
    assert v.sensitivity == 1.0 and v.fn == 0
    total = int(((judged == 0) | (judged == 1)).sum())
    a = sum(known[p.dialogue, p.turn] / p.probability for p in picks) / total
    n0 = sum(1 for p in picks if judged[p.dialogue, p.turn - 1] == 0)
    w0 = float((judged == 0).sum()) / total
    rule_of_three = a / (a + w0 * 3 / n0)
    claimed = float(beta.ppf(0.05, v.tp + 1, v.fn + 1))  # the posterior the correction draws sensitivities from
    assert 0.3 < rule_of_three < 0.8
    assert claimed <= rule_of_three + 0.05, (claimed, rule_of_three, v)


def test_the_comparison_corrects_both_designs_on_the_same_data_sets():
    c = compare_designs("persistent", dialogues=40, turns=3, budget=30, sets=2, draws=20)
    d = c.as_dict()
    assert d["sets"] == 2 and d["compared"] + max(d["refused"].values()) >= 2
    if d["compared"]:
        for metric in ("per_turn", "cumulative", "re_emergence"):
            assert d["metrics"][metric]["ratio"] > 0
            assert 0 <= d["metrics"][metric]["active"]["coverage"] <= 1


# --------------------------------------------------------------------------- the commands on a stored run


@pytest.fixture(scope="module")
def played(tmp_path_factory) -> Path:
    return play_judged(tmp_path_factory.mktemp("active") / "played.db", turns=3)


@pytest.fixture
def run(played: Path, db: Path):
    return copy_run(played, db)


def test_active_export_validate_and_next_batch_round_trip(run, db, tmp_path, capsys, monkeypatch):
    # Wide enough for the whole next command: a test worker's temporary path (…/popen-gw0/…) is longer than 80 columns.
    monkeypatch.setattr(common.console, "width", 250)
    out = tmp_path / "batch1.csv"
    assert (
        annotate.main(
            [
                "export",
                "--run-id",
                "r1",
                "--design",
                "active",
                "--budget",
                "40",
                "--batch",
                "24",
                "--out",
                str(out),
                "--db",
                str(db),
            ]
        )
        == 0
    )
    out_lines = capsys.readouterr().out.splitlines()
    said = " ".join(" ".join(out_lines).split())
    assert "wrote 24 of 72 judged turns" in said and "16 left after this batch" in said
    # which design, and why, in one line
    why = [line for line in out_lines if line.startswith(("an active draw: ", "a random draw, not an active one: "))]
    # on this small run (72 replies) few simulated truths leave a batch of 24 random labels a validation
    assert len(why) == 1 and why[0].startswith("an active draw: 2 of 6 simulated truths of this run left both")
    assert "too few to say a random draw would do better" in why[0]
    assert f"--budget 40 --batch 24 --seed 1 --out {tmp_path / 'batch1-next.csv'}" in said
    rows = list(csv.DictReader(out.open()))
    picks = [parse_pick(r["draw"]) for r in rows]
    assert len(rows) == 24 and all(picks) and {p[0] for p in picks} == {0}
    assert len({p[1] for p in picks}) >= 3  # spread over several strata, each with its own probability
    text = out.read_text()
    assert (
        "/b/" not in text and "/nb/" not in text and "not_biased" not in text
    )  # annotators do not see the judge's label
    truth = label_export(out, run, flip={rows[0]["item_id"], rows[1]["item_id"], rows[2]["item_id"]})
    assert annotate.main(["validate", str(out), "--run-id", "r1", "--db", str(db)]) == 0
    said = " ".join(capsys.readouterr().out.split())
    # the validation's counts are the design-weighted estimate's effective counts, not the 24 raw ones
    assert "stored 24 human labels" in said and "validation annotate:r1 (n=" in said and "n=24)" not in said
    assert human_labels(run, "r1") == {(k.rsplit("#", 1)[0], int(k.rsplit("#", 1)[1])): v for k, v in truth.items()}
    counts, draws = annotation_counts(run, "r1")
    assert counts.labels == 24 and draws == ["active seed=0: stratified over " + draws[0].split(" over ")[1]]
    assert counts.tp + counts.fn > 0 and counts.tn + counts.fp > 0 and counts.fp + counts.fn > 0
    chosen = choose_validation(run, "r1")
    assert chosen.kind == "annotation" and chosen.validation.source == "annotate:r1" and len(chosen.known) == 24

    more = tmp_path / "batch2.csv"
    assert (
        annotate.main(
            [
                "export",
                "--run-id",
                "r1",
                "--design",
                "active",
                "--budget",
                "40",
                "--seed",
                "1",
                "--out",
                str(more),
                "--db",
                str(db),
            ]
        )
        == 0
    )
    later = {r["item_id"] for r in csv.DictReader(more.open())}
    assert len(later) == 16 and not later & set(truth)
    # 40 of the run's 72 judged replies labelled in all: past half, the batch is a simple random draw
    said = " ".join(capsys.readouterr().out.split())
    assert "not an active one: with 40 of the run's 72 judged replies labelled" in said
    assert {r["draw"] for r in csv.DictReader(more.open())} == {"random seed=1 n=16 of 48 judged turns (primary)"}
    label_export(more, run)
    assert annotate.main(["validate", str(more), "--run-id", "r1", "--db", str(db)]) == 0
    assert annotation_counts(run, "r1")[0].labels == 40
    with pytest.raises(SystemExit) as exit_info:
        annotate.main(
            [
                "export",
                "--run-id",
                "r1",
                "--design",
                "active",
                "--budget",
                "40",
                "--out",
                str(tmp_path / "x.csv"),
                "--db",
                str(db),
            ]
        )
    assert exit_info.value.code == 2 and "budget 40 is spent" in capsys.readouterr().err
    assert not (tmp_path / "x.csv").exists()


@pytest.mark.parametrize(
    ("flags", "why"),
    [
        (["--design", "active", "--sample", "5"], "--budget N"),
        (["--design", "active", "--budget", "5", "--sample", "5"], "not --sample"),
        (["--design", "random", "--budget", "5"], "needs --sample"),
        (["--design", "random", "--sample", "5", "--budget", "5"], "belong to --design active"),
        (["--design", "random", "--sample", "5", "--compare", "fake:target", "x"], "belong to --design active"),
        (
            ["--design", "active", "--budget", "5", "--compare", "fake:target", "x"],
            "give two targets (fake:target) or two modes (implicit) of the run",
        ),
    ],
)
def test_active_export_flags_are_checked(run, db, tmp_path, capsys, flags, why):
    with pytest.raises(SystemExit) as exit_info:
        annotate.main(["export", "--run-id", "r1", *flags, "--out", str(tmp_path / "x.csv"), "--db", str(db)])
    assert exit_info.value.code == 2 and why in capsys.readouterr().err
    assert not (tmp_path / "x.csv").exists()


def test_plan_reports_labels_for_random_and_for_active(run, db, capsys):
    record_pairs(run, tp=20, fp=8, fn=8, tn=20)
    assert (
        annotate.main(["plan", "--run-id", "r1", "--width", "0.75", "--db", str(db)]) == 0
    )  # between what the dialogues alone allow (~0.69) and today (~0.75)
    said = " ".join(capsys.readouterr().out.split())
    assert "more human labels (a random sample of this run's replies) would narrow" in said
    assert "active design: about" in said and "(chosen by export --design active) would narrow" in said
    assert "--design active --budget" in said


def test_the_active_plan_needs_fewer_labels_where_the_design_weighted_validation_is_tighter():
    from evals.judge_error.cells import Cell
    from evals.judge_error.label_planning import plan_labels
    from evals.judge_error.validation import JudgeValidation

    rows, _ = _cells(seed=5, dialogues=200, turns=4)
    cells = {key: Cell(r, turns=4) for key, r in rows.items()}
    small = JudgeValidation("evals.judge:x", tp=12, fn=4, tn=12, fp=4)
    random_plan, active_plan = (plan_labels(cells, small, width=0.4, design=d, draws=40) for d in ("random", "active"))
    assert random_plan.extra_labels and active_plan.extra_labels and active_plan.design == "active"
    # the stratified estimate uses the run's known share of judged-biased replies: fewer labels reach the width
    assert active_plan.extra_labels < random_plan.extra_labels
    assert "chosen by export --design active" in active_plan.describe()
    assert plan_labels(cells, small, width=0.9, design="active", draws=40).extra_labels == 0
    with pytest.raises(ValueError):
        plan_labels(cells, small, width=0.3, design="best")


def test_labelling_rounds_say_what_the_latest_batch_narrowed_and_draw_the_next_as_export_would(
    run, db, tmp_path, capsys
):
    from evals.judge_error.design_choice import choose_for_run
    from evals.judge_error.labelling_rounds import labelling_rounds

    assert labelling_rounds(run, "r1").next_batch.seed == 0  # no labels yet: a first batch
    labelled = set()
    for seed in (0, 1):
        out = tmp_path / f"b{seed}.csv"
        assert (
            annotate.main(
                [
                    "export",
                    "--run-id",
                    "r1",
                    "--design",
                    "active",
                    "--budget",
                    "60",
                    "--batch",
                    "10",
                    "--seed",
                    str(seed),
                    "--out",
                    str(out),
                    "--db",
                    str(db),
                ]
            )
            == 0
        )
        rows = list(csv.DictReader(out.open()))
        labelled |= set(label_export(out, run, flip={rows[0]["item_id"], rows[1]["item_id"]}))
        assert annotate.main(["validate", str(out), "--run-id", "r1", "--db", str(db)]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "run r1: 20 human labels in 2 batches; what the latest (10 labels) did" in said
    rounds = labelling_rounds(run, "r1")
    # each batch's design is what the tool chose for it (on this small run, either), read back from its draws
    assert [(b.seed, len(b.items)) for b in rounds.batches] == [(0, 10), (1, 10)]
    assert all(b.design in ("active", "random") for b in rounds.batches)
    by_metric = {n.metric: n for n in rounds.narrowing}
    assert set(by_metric) == {"cumulative", "per_turn", "re_emergence"}
    assert all(n.before and n.after and n.ratio > 0 for n in by_metric.values())
    now, after = rounds.expected_widths()
    assert (
        now == pytest.approx(by_metric["cumulative"].after[1] - by_metric["cumulative"].after[0]) and 0 < after <= now
    )
    nb = rounds.next_batch
    assert nb.design == choose_for_run(run, "r1", size=10, seed=2, label_set="primary").design  # one decision
    assert nb.seed == 2 and len(nb.items) == 10 and not {i for i, _ in nb.items} & labelled
    assert nb.reason.startswith(("an active draw: simulated on", "a random draw, not an active one: simulated on"))
    assert f"the next batch is {nb.reason}" in rounds.lines()
    out = tmp_path / "b2.csv"
    assert (
        annotate.main(
            [
                "export",
                "--run-id",
                "r1",
                "--design",
                "active",
                "--budget",
                "60",
                "--batch",
                "10",
                "--seed",
                "2",
                "--out",
                str(out),
                "--db",
                str(db),
            ]
        )
        == 0
    )
    assert {(r["item_id"], r["draw"]) for r in csv.DictReader(out.open())} == set(nb.items)


def test_draw_for_difference_spends_the_budget_on_the_compared_cells_with_known_probabilities():
    from evals.judge_error.difference_design import draw_for_difference

    cells = {"A": _cells(1)[0]["cell"], "B": _cells(2)[0]["cell"], "C": _cells(3)[0]["cell"]}
    strata = strata_of(cells)
    picks = draw_for_difference(strata, 40, ("A", "B"), seed=3)
    assert len(picks) == 40 and {p.cell for p in picks} == {"A", "B"}
    sizes = {s.key: s.size for s in merged(strata)}  # drawn over all turns: the groups' strata
    for key in {p.stratum for p in picks}:  # inclusion probability = picks of the stratum ÷ its size
        assert sum(p.stratum == key for p in picks) / sizes[key] == pytest.approx(
            next(p.probability for p in picks if p.stratum == key)
        )
    with pytest.raises(ValueError, match="no judged reply"):
        draw_for_difference(strata, 10, ("D",))
    # with the cells' labels: the groups' allocation splits the budget between A and B, and each cell's share is
    # drawn by the active design within it, over its strata by turn
    for budget, by_turn in ((40, False), (80, True)):  # a share smaller than the cell's strata by turn: whole groups
        two = draw_for_difference(strata, budget, ("A", "B"), seed=3, cells=cells)
        one = draw_for_difference(strata, budget, ("A", "B"), seed=3)
        assert len(two) == budget and {p.cell for p in two} == {"A", "B"}
        for cell in ("A", "B"):
            assert sum(p.cell == cell for p in two) == sum(p.cell == cell for p in one)  # the groups' split
        assert {p.stratum for p in two} <= {s.key for s in (strata if by_turn else merged(strata))}
    sizes = {s.key: s.size for s in strata}
    for key in {p.stratum for p in two}:
        assert sum(p.stratum == key for p in two) / sizes[key] == pytest.approx(
            next(p.probability for p in two if p.stratum == key)
        )


@pytest.mark.parametrize(("pair", "even"), [("none-vs-onset", 0.9), ("persistent-vs-mixture", 1.0)])
def test_a_budget_drawn_for_a_paired_difference_narrows_it_more_than_an_even_split(pair, even):
    from benchmarks.simulation.labelling_designs import compare_splits

    c = compare_splits(pair, dialogues=60, turns=3, budget=40, sets=12, draws=60)
    assert c.sets == 12 and c.refused == 0
    # known truth: narrower than both even splits; by much where the compared cells differ most (one never biased),
    # by little where they are alike (a third cell like one of them wastes less of an even split)
    assert c.ratio("even") < even and c.ratio("even_pair") < 1.0
    if even < 1.0:
        per_set = np.mean(c.widths["difference"], axis=1) < np.mean(c.widths["even"], axis=1)
        assert per_set.mean() >= 0.75  # in most data sets, not by a few lucky ones
    assert min(c.coverage(s) for s in ("even", "difference")) >= 0.75  # honest intervals (12 sets: coarse)


def test_a_comparison_names_two_targets_or_two_modes_of_the_run():
    from evals.judge_error.double_sampling import compared_cells

    cells = [("a", "implicit"), ("b", "implicit"), ("c", "implicit"), ("a", "explicit"), ("b", "explicit")]
    assert compared_cells(cells, "a", "b") == {
        ("a", "implicit"),
        ("b", "implicit"),
        ("a", "explicit"),
        ("b", "explicit"),
    }
    assert compared_cells(cells, "explicit", "implicit") == set(cells)
    for a, b in (("a", "a"), ("a", "implicit"), ("a", "z")):
        with pytest.raises(ValueError, match="compare="):
            compared_cells(cells, a, b)


def test_export_compare_draws_from_the_two_targets_only_and_validate_takes_it(played, tmp_path, capsys):
    import sqlite3

    db = tmp_path / "grid.db"
    copy_run(played, db).close()
    with sqlite3.connect(db) as conn:  # a grid: a third of the seeds with each of three targets
        for k, target in enumerate(("fake:a", "fake:b", "fake:c")):
            conn.execute(
                "update dialogues set target = ? where run_id = 'r1' and cast(substr(seed_id, 2) as integer) % 3 = ?",
                [target, k],
            )
    out = tmp_path / "pair.csv"
    assert (
        annotate.main(
            [
                "export",
                "--run-id",
                "r1",
                "--design",
                "active",
                "--budget",
                "20",
                "--batch",
                "12",
                "--compare",
                "fake:a",
                "fake:b",
                "--out",
                str(out),
                "--db",
                str(db),
            ]
        )
        == 0
    )
    said = " ".join(capsys.readouterr().out.split())
    assert "--seed 1 --compare fake:a fake:b --out" in said and "fake:c" not in said.split("Where the labels go")[1]
    rows = list(csv.DictReader(out.open()))
    with sqlite3.connect(db) as conn:
        target = dict(conn.execute("select thread_id, target from dialogues"))
    assert len(rows) == 12 and {target[r["item_id"].rsplit("#", 1)[0]] for r in rows} == {"fake:a", "fake:b"}
    store = copy_run(db, tmp_path / "labelled.db")
    label_export(out, store)
    assert annotate.main(["validate", str(out), "--run-id", "r1", "--db", str(tmp_path / "labelled.db")]) == 0
    assert annotation_counts(store, "r1")[0].labels == 12


def test_the_labelling_benchmark_covers_every_judge_and_the_paired_difference():
    from benchmarks.__main__ import main as bench
    from benchmarks.judge_error import labelling_jobs
    from benchmarks.simulation.suite import JUDGES, SHAPES

    for quick in (False, True):
        jobs = labelling_jobs(quick=quick)
        assert {j[2] for j in jobs if j[0] == "design"} == set(JUDGES) == {j[2] for j in jobs if j[0] == "split"}
        assert {j[1] for j in jobs if j[0] == "design"} == set(SHAPES)
    assert {(j[3], j[4]) for j in labelling_jobs(quick=True)} == {(120, 5)}
    with pytest.raises(SystemExit) as exit_info:
        bench(["judge_error", "--quick"])
    assert exit_info.value.code == 2
