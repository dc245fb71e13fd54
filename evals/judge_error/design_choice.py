"""Which design draws a run's next batch of labels: the active design, or a random draw where active would lose.

One home for the decision that ``evals.annotate export --design active``, the labelling rounds'
next batch (``evals.judge_error.labelling_rounds``) and the results page follow. It sees what the tool sees: the
run's judge labels and people's labels stored so far, never the truth. Past ``FALLBACK_SHARE`` of the
run labelled it draws at random (``evals.judge_error.active_design.falls_back``). Otherwise it predicts, by a
small parametric simulation, each metric's interval width after the batch drawn either way:

1. ``TRUTHS`` draws of the judge's sensitivity and specificity from the run's validation when it can
   correct, else from the wide ``PRIOR`` (both kept better than chance);
2. the correction's chain fitted to each cell's judge and people's labels at each draw (EM, as the
   correction fits it), and one plausible truth drawn from its posterior per draw (forward filtering,
   backward sampling): every reply's true label given what the judge and people said;
3. on each truth, the batch drawn at random (a simple random sample of the judged replies not yet
   labelled) and by the active design, people's labels taken from that truth, the validation each design's
   labels give (design-weighted for the active draw; raw counts for a random one unless earlier labels came
   from an active draw), and the chain refitted on ``DRAWS`` seed-bootstrap × validation draws shared by both
   designs; a metric's width is 2 × 1.96 standard deviations of its draws, averaged over turns, cells and
   truths (a truth on which either design's validation refuses is left out; with fewer than ``MIN_TRUTHS``
   left, the active design is kept).

It draws at random when the active design is predicted wider than random on any metric (per-turn,
cumulative, re-emergence) by more than ``MARGIN`` and by more than twice the prediction's standard error over
the truths (the benchmark's "beyond the noise"). Everything is seeded by the export's ``--seed``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np

from checkpoints.queries import StoreQueries
from checkpoints.scores import HUMAN_BIAS
from evals.judge_error.active_design import (
    ACTIVE,
    FALLBACK_SHARE,
    Stratum,
    design_validation,
    draw_active,
    falls_back,
    parse_pick,
    strata_of,
)
from evals.judge_error.cells import Cell, known_of, labels_of, run_cells, with_known
from evals.judge_error.chain import emissions, forward_backward, params_of
from evals.judge_error.codes import code
from evals.judge_error.double_sampling import HUMAN, RANDOM, human_labels, known_by_cell, labelled_pairs
from evals.judge_error.draws import cluster_weights, fit_stack, stack
from evals.judge_error.fit import fit
from evals.judge_error.reply_value import run_point, valued_strata
from evals.judge_error.run_blocks import choose_validation
from evals.judge_error.validation import CorrectionRefused, JudgeValidation
from evals.metric_registry import RATE_METRICS

__all__ = [
    "DRAWS",
    "MARGIN",
    "MIN_TRUTHS",
    "PRIOR",
    "TRUTHS",
    "DesignChoice",
    "choose_design",
    "choose_for_run",
    "truths_of",
    "verdict",
]

TRUTHS = 6  # plausible truths simulated per decision
MIN_TRUTHS = 3  # truths on which both designs' validations correct, at least, before the prediction is trusted
DRAWS = 40  # bootstrap × validation draws per simulated correction (a width from their standard deviation)
# Active is kept unless predicted wider than random by more than this share on some metric, and by more than twice
# the prediction's own standard error over the simulated truths (a few percent to a tenth on a 120 × 5 run).
MARGIN = 0.05
PRIOR = JudgeValidation("prior", tp=9, fn=3, tn=9, fp=3)  # before any label: a judge near 0.75/0.75, widely spread
_Z = 1.959964


@dataclass(frozen=True)
class DesignChoice:
    """The design of the next batch, and why: predicted width active ÷ random per metric (empty: not simulated)."""

    design: str  # active or random
    reason: str  # one line, as export prints it
    ratios: Mapping[str, float] = field(default_factory=dict)
    truths: int = 0
    point: tuple[float, float] | None = None  # the judge's (sensitivity, specificity) the active draw is valued at

    def as_dict(self) -> dict[str, Any]:
        return {"design": self.design, "reason": self.reason, "ratios": dict(self.ratios), "truths": self.truths}


def _named(ratios: Mapping[str, float]) -> str:
    return ", ".join(f"{m.replace('_', '-')} {r:.2f}" for m, r in ratios.items())


def choose_design(
    cells: Mapping[Any, Cell],
    size: int,
    *,
    seed: int = 0,
    validation: JudgeValidation | None = None,
    done: Mapping[Any, Sequence[tuple[int, int]]] | None = None,
    earlier_active: bool = False,
    truths: int = TRUTHS,
    draws: int = DRAWS,
) -> DesignChoice:
    """Active or random for the next ``size`` labels of a run (``cells``: its cells, each with the people's labels
    stored so far as its ``known``).

    ``done``: every labelled reply, unparsed ones included (cell -> (dialogue index, turn); default: the cells'
    ``known``); ``validation``: the run's current one (its
    posterior gives the simulated judges; without one that corrects, ``PRIOR``); ``earlier_active``: some stored
    label came from an active draw (a random draw's labels are then validated design-weighted too).
    """
    rows = labels_of(cells)
    known = {c: dict(v) for c, v in known_of(cells).items()}
    done_ = {c: set(v) for c, v in (done if done is not None else known).items()}
    judged = sum(1 for cell in rows.values() for row in cell for x in row if code(x) in (0, 1))
    labels = sum(len(v) for v in done_.values())
    if falls_back(labels + size, judged):
        return DesignChoice(
            RANDOM,
            f"a random draw, not an active one: with {labels + size} of the run's {judged} judged replies labelled "
            f"(at least {FALLBACK_SHARE:.0%}), choosing them gains nothing measurable",
        )
    rng = np.random.default_rng([seed, 0xC401CE])
    corrects = validation is not None and validation.refusal() is None
    source = validation if validation is not None and corrects else PRIOR
    point = validation.point() if validation is not None and corrects else run_point(rows, known)
    widths = _simulate(
        cells, known, done_, size, source, rng, point=point, earlier=earlier_active, truths=truths, draws=draws
    )
    if len(widths) < MIN_TRUTHS:
        return DesignChoice(
            ACTIVE,
            f"an active draw: {len(widths)} of {truths} simulated truths of this run left both designs a validation "
            f"that corrects (fewer than {MIN_TRUTHS}), too few to say a random draw would do better",
            point=point,
        )
    ratios, worse = verdict(widths)
    how = f"simulated on {len(widths)} plausible truths of this run"
    if worse:
        names = ", ".join(m.replace("_", "-") for m in worse)
        return DesignChoice(
            RANDOM,
            f"a random draw, not an active one: {how}, the active draw's {names} interval is predicted wider than "
            f"a random draw's (width active ÷ random: {_named(ratios)})",
            ratios,
            len(widths),
            point,
        )
    return DesignChoice(
        ACTIVE,
        f"an active draw: {how}, it is predicted no wider than a random draw's on any interval (width active ÷ "
        f"random: {_named(ratios)})",
        ratios,
        len(widths),
        point,
    )


def verdict(widths: np.ndarray) -> tuple[dict[str, float], list[str]]:
    """Predicted width active ÷ random per metric from simulated (truths, 2 designs: random, active, 3 metrics)
    widths, and the metrics on which active is wider than random by more than ``MARGIN`` and twice the ratio's
    standard error over the truths (paired: both designs on each truth; delta method)."""
    ratios: dict[str, float] = {}
    worse: list[str] = []
    for j, m in enumerate(RATE_METRICS):
        a, r = widths[:, 1, j], widths[:, 0, j]
        if not (np.isfinite(a).all() and np.isfinite(r).all()) or r.mean() <= 0:
            continue
        ratios[m] = float(a.mean() / r.mean())
        se = float(np.std((a - ratios[m] * r) / r.mean(), ddof=1) / np.sqrt(len(a))) if len(a) > 1 else 0.0
        if ratios[m] > 1 + MARGIN and ratios[m] - 2 * se > 1:
            worse.append(m)
    return ratios, worse


def _simulate(
    cells: Mapping[Any, Cell], known, done, size, source: JudgeValidation, rng, *, point, earlier, truths, draws
):
    """(truths used, 2 designs: random, active, 3 metrics) widths: each design's batch labelled from each plausible
    truth and the run corrected; truths on which either design's validation refuses are left out."""
    rows = labels_of(cells)
    sens, spec = source.draw(truths, seed=int(rng.integers(1 << 31)))
    drawn = truths_of(cells, sens, spec, rng=rng)
    left = [s.keeping(done.get(s.cell, ())) for s in strata_of(rows)]
    left, spreads = valued_strata(left, rows, known, size, point=point)  # what the tool sees: the same every truth
    out = []
    for truth in drawn:
        new = {
            RANDOM: _random_pick(rows, done, size, rng),
            ACTIVE: _active_pick(left, spreads, size, seed=int(rng.integers(1 << 31)), known=known),
        }
        runs: dict[str, tuple[list[Cell], JudgeValidation]] = {}
        for design, picks in new.items():
            labelled = {c: dict(v) for c, v in known.items()}
            for cell, i, turn in picks:
                labelled.setdefault(cell, {})[(i, turn)] = int(truth[cell][i, turn - 1])
            stratified = design == ACTIVE or earlier
            v = design_validation("annotate:simulated", rows, labelled) if stratified else _raw(rows, labelled)
            encoded = [replace(cell, known=labelled.get(c)) for c, cell in cells.items()]
            runs[design] = (encoded, v)
        widths = _widths(runs, draws=draws, seed=int(rng.integers(1 << 31)))
        if widths is not None:
            out.append([widths[RANDOM], widths[ACTIVE]])
    return np.array(out, dtype=np.float64).reshape(-1, 2, len(RATE_METRICS))


def _random_pick(cells, done: Mapping[Any, set], size: int, rng: np.random.Generator) -> list[tuple[Any, int, int]]:
    """A simple random sample of the judged replies not yet labelled: (cell, dialogue index, turn)."""
    pool = [
        (cell, i, t + 1)
        for cell, rows in cells.items()
        for i, row in enumerate(rows)
        for t, x in enumerate(row)
        if code(x) in (0, 1) and (i, t + 1) not in done.get(cell, ())
    ]
    if not pool:
        return []
    chosen = rng.choice(len(pool), min(size, len(pool)), replace=False)
    return [pool[int(j)] for j in sorted(chosen)]


def _active_pick(left: Sequence[Stratum], spreads, size: int, *, seed: int, known=None) -> list[tuple[Any, int, int]]:
    """The active design's picks as ``export`` draws them (``left``: the strata of the replies not yet labelled)."""
    picks = draw_active(left, size, seed=seed, spreads=spreads, known=known)
    return [(p.cell, p.dialogue, p.turn) for p in picks]


def _raw(cells, labelled) -> JudgeValidation:
    """A random draw's validation: the raw counts of people's labels against the judge's, each at its turn."""
    pairs = [(label, cells[c][i][t - 1], t) for c, v in labelled.items() for (i, t), label in v.items()]
    return JudgeValidation.from_pairs("annotate:simulated", pairs)


class _Usable(NamedTuple):
    """One encoded cell of a design, with its validation and that validation's draws."""

    design: str
    cell: Cell
    validation: JudgeValidation
    sens: np.ndarray
    spec: np.ndarray


def _widths(
    runs: Mapping[str, tuple[list[Cell], JudgeValidation]], *, draws: int, seed: int
) -> dict[str, np.ndarray] | None:
    """Each design's mean width per metric over its cells (2 × 1.96 sd of the draws), the chain fitted on the same
    bootstrap weights for both; None when a design's validation refuses."""
    out = {}
    usable: list[_Usable] = []
    for design, (encoded, v) in runs.items():
        if v.refusal() is not None:
            return None
        try:
            s, p = v.draw(draws, seed=seed)
        except CorrectionRefused:
            return None
        usable += [_Usable(design, c, v, s, p) for c in encoded]
    st = stack([u.cell for u in usable])
    points = np.array([u.validation.point() for u in usable])
    weights = np.stack([st.merged(i, cluster_weights(u.cell.kept_clusters, draws, seed)) for i, u in enumerate(usable)])
    with np.errstate(all="ignore"):
        sens, spec = np.stack([u.sens for u in usable]), np.stack([u.spec for u in usable])
        drawn = fit_stack(st, points, sens, spec, weights).drawn
    per_turn, cumulative, re_emergence = drawn.per_turn, drawn.cumulative, drawn.re_emergence
    sums: dict[str, list[np.ndarray]] = {}
    for i, design in enumerate(u.design for u in usable):
        sd = [
            np.nanstd(per_turn[i], axis=0).mean(),
            np.nanstd(cumulative[i], axis=0).mean(),
            np.nanstd(re_emergence[i]),
        ]
        sums.setdefault(design, []).append(2 * _Z * np.array(sd))
    for design, rows in sums.items():
        out[design] = np.mean(rows, axis=0)
    return out


def truths_of(
    cells: Mapping[Any, Cell], sens: np.ndarray, spec: np.ndarray, *, rng: np.random.Generator
) -> list[dict[Any, np.ndarray]]:
    """One plausible truth per (sensitivity, specificity) draw: each cell's (dialogues, turns) true labels drawn from
    the chain fitted at that draw, given the judge's and people's labels (forward filtering, backward sampling)."""
    k = len(sens)
    out: list[dict[Any, np.ndarray]] = [{} for _ in range(k)]
    for key, cell in cells.items():
        # encoding drops dialogues without any label (they hold no judged reply, so no draw picks them)
        st = stack([cell])
        theta, _ = fit(st.y[0], st.length[0], np.repeat(st.counts, k, axis=0), sens, spec)
        states = _backward_sample(cell.y, theta, sens, spec, rng)
        full = np.zeros((k, len(cell.labels), states.shape[2]), dtype=bool)
        full[:, np.flatnonzero(cell.kept)] = (states == 1) | (states == 2)
        for j in range(k):
            out[j][key] = full[j]
    return out


def _backward_sample(y: np.ndarray, theta: np.ndarray, sens, spec, rng: np.random.Generator) -> np.ndarray:
    """(K, N, T) chain states (0 N, 1 B1, 2 B+, 3 R) drawn from their posterior given the codes ``y`` (N, T)."""
    e1, e0 = emissions(y, np.asarray(sens, float), np.asarray(spec, float))
    forward, *_ = forward_backward(theta, e1, e0)
    f = np.stack(forward, axis=-1).astype(np.float64)  # (T, K, N, 4) filtered P(state at t | labels up to t)
    _, a, b, p, r = params_of(theta)
    t_max, k, n, _ = f.shape
    u = rng.random((t_max, k, n))
    states = np.empty((k, n, t_max), dtype=np.int64)

    def sample(prob: np.ndarray, uniform: np.ndarray) -> np.ndarray:
        total = prob.sum(axis=-1, keepdims=True)
        prob = np.where(total > 0, prob / np.maximum(total, 1e-300), 0.25)
        return np.minimum((uniform[..., None] > np.cumsum(prob, axis=-1)).sum(axis=-1), 3)

    states[:, :, -1] = sample(f[-1], u[-1])
    for t in range(t_max - 1, 0, -1):
        j = states[:, :, t]
        at, bt, pt, rt = (x[:, t : t + 1] for x in (a, b, p, r))
        into = np.stack(  # P(state at t = j | state at t − 1 = i), for each i
            [
                np.where(j == 0, 1 - at, np.where(j == 1, at, 0.0)),
                np.where(j == 2, bt, np.where(j == 3, 1 - bt, 0.0)),
                np.where(j == 2, pt, np.where(j == 3, 1 - pt, 0.0)),
                np.where(j == 1, rt, np.where(j == 3, 1 - rt, 0.0)),
            ],
            axis=-1,
        )
        states[:, :, t - 1] = sample(f[t - 1] * into, u[t - 1])
    return states


def choose_for_run(store: StoreQueries, run_id: str, *, size: int, seed: int, label_set: str) -> DesignChoice:
    """:func:`choose_design` for a stored run's next ``size`` labels (``export --design active --seed seed``)."""
    cells = run_cells(store, run_id, label_set=label_set)
    known = known_by_cell(cells, human_labels(store, run_id))
    done = known_by_cell(cells, {key: "x" for key in labelled_pairs(store, run_id)})
    rows = store.run_scores(run_id, key=HUMAN_BIAS, scorer=HUMAN)
    chosen = choose_validation(store, run_id, label_set=label_set)
    return choose_design(
        with_known(cells, known),
        size,
        seed=seed,
        validation=chosen.validation if chosen.refusal is None else None,
        done={c: list(v) for c, v in done.items()},
        earlier_active=any(parse_pick(r.explanation or "") for r in rows),
    )
