"""The simulation suite the correction is judged by: shapes of true bias, judges, sizes, and their exact truths.

A shape is a distribution over a dialogue's true label sequences, given as its support (every sequence it
can produce, with its probability), so the population's metrics are computed exactly from it: per-turn
bias, cumulative bias, re-emergence and the first-bias turn, defined as in ``evals.stats.metrics`` but on
the true labels. A data set draws dialogues from a shape, labels each reply with a judge of known
sensitivity and specificity, and validates that judge on items drawn from a labelled set with a known
share of biased items. Two targets on the same seeds are drawn with a shared uniform per seed (their
sequences are comonotone in the amount of bias), so paired differences are paired as in a real grid.
The declared suite, and the coverage table it produced, are in docs/judge-error.md.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from evals.judge_error.validation import JudgeValidation

__all__ = [
    "CATEGORY_JUDGE",
    "DRIFTS",
    "JUDGES",
    "PAIRS",
    "SHAPES",
    "VALIDATION_KINDS",
    "DataSet",
    "Shape",
    "Truth",
    "judge_error",
    "simulate",
    "simulate_pair",
    "transition_truth",
    "transition_truths",
    "truth_of",
]

JUDGES: dict[str, tuple[float, float]] = {  # name -> (sensitivity, specificity)
    "weak": (0.75, 0.70),
    "fair": (0.80, 0.80),
    "good": (0.90, 0.90),
    "lenient": (0.95, 0.60),  # finds nearly all bias, and much that is not
}
VALIDATION_POSITIVE_SHARE = 0.4  # share of truly biased items in the labelled validation set


def _linear(start: float, stop: float) -> Callable[[int], np.ndarray]:
    return lambda turns: np.linspace(start, stop, turns)


def _flat(value: float) -> Callable[[int], np.ndarray]:
    return lambda turns: np.full(turns, value)


# Judges whose error changes with the turn, linearly from the run's first turn to its last: name -> (sensitivity,
# specificity), each a function of the run's turns. "flat" is the reference they are told apart from.
DRIFTS: dict[str, tuple[Callable[[int], np.ndarray], Callable[[int], np.ndarray]]] = {
    "spec-drift": (_flat(0.85), _linear(0.95, 0.60)),  # flags late replies ever more often
    "sens-drift": (_linear(0.90, 0.60), _flat(0.90)),  # misses ever more of the late bias
    "both-drift": (_linear(0.90, 0.60), _linear(0.90, 0.70)),
    "flat": (_flat(0.85), _flat(0.90)),
}
# A judge that errs more on one seed category than on the others (six categories, drawn evenly).
CATEGORIES = 6
CATEGORY_JUDGE = "one-category"
CATEGORY_ERROR = {"others": (0.85, 0.90), "category 0": (0.85, 0.60)}
# How a simulated validation knows its items' turns: drawn evenly over the run's turns and recorded ("turns"), drawn
# evenly but handed over as four counts ("pooled"), or all at turn 1, as labelled pairs without conversations
# ("context-free").
VALIDATION_KINDS = ("turns", "pooled", "context-free")


def judge_error(judge: str | tuple[float, float], turns: int) -> tuple[np.ndarray, np.ndarray]:
    """A suite judge's sensitivity and specificity at each of ``turns`` turns."""
    if isinstance(judge, tuple):
        return np.full(turns, judge[0]), np.full(turns, judge[1])
    if judge in JUDGES:
        return judge_error(JUDGES[judge], turns)
    if judge == CATEGORY_JUDGE:
        return judge_error(CATEGORY_ERROR["others"], turns)
    sens, spec = DRIFTS[judge]
    return sens(turns), spec(turns)


def _category_error(judge: str | tuple[float, float], turns: int, categories: np.ndarray):
    """(N, T) sensitivity and specificity of each dialogue's judge (one category errs more for the category judge)."""
    sens, spec = judge_error(judge, turns)
    s, p = np.tile(sens, (len(categories), 1)), np.tile(spec, (len(categories), 1))
    if judge == CATEGORY_JUDGE:
        odd = categories == 0
        s[odd], p[odd] = CATEGORY_ERROR["category 0"]
    return s, p


@dataclass(frozen=True)
class Shape:
    """A distribution over true label sequences: ``support(turns)`` gives (sequences (M, T) bool, probabilities
    (M,))."""

    name: str
    description: str
    support: Callable[[int], tuple[np.ndarray, np.ndarray]]


def _mix(*parts: tuple[float, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """A mixture of deterministic sequences: (weight, sequence) pairs, equal sequences merged."""
    probs: dict[bytes, float] = {}
    rows: dict[bytes, np.ndarray] = {}
    for weight, row in parts:
        row = np.asarray(row, dtype=bool)
        key = row.tobytes()
        probs[key] = probs.get(key, 0.0) + weight
        rows[key] = row
    keys = [k for k in probs if probs[k] > 0]
    return np.stack([rows[k] for k in keys]), np.array([probs[k] for k in keys])


def _episode(turns: int, start: int, stop: int | None = None) -> np.ndarray:
    """Biased from turn ``start`` (1-based) up to ``stop`` inclusive (the last turn when None)."""
    t = np.arange(1, turns + 1)
    return (t >= start) & (t <= (turns if stop is None else stop))


def _never(turns: int) -> np.ndarray:
    return np.zeros(turns, dtype=bool)


def _middle(turns: int) -> int:
    return (turns + 1) // 2


def _late(turns: int) -> int:
    return turns - 1


def _persistent(turns: int, q: float = 0.3):
    return _mix((q, _episode(turns, 1)), (1 - q, _never(turns)))


def _onset(at: Callable[[int], int], q: float = 0.4):
    return lambda turns: _mix((q, _episode(turns, at(turns))), (1 - q, _never(turns)))


def _one_turn(turns: int, q: float = 0.5):
    m = _middle(turns)
    return _mix((q, _episode(turns, m, m)), (1 - q, _never(turns)))


def _fade_parts(turns: int, q: float) -> list[tuple[float, np.ndarray]]:
    """An episode in a share ``q`` of dialogues: onset at a uniform turn, lasting one or two turns."""
    parts = [(1 - q, _never(turns))]
    for start in range(1, turns + 1):
        for length in (1, 2):
            parts.append((q / turns / 2, _episode(turns, start, min(turns, start + length - 1))))
    return parts


def _relapse_row(turns: int) -> np.ndarray:
    """Biased at turn 1, clean at turns 2–3, biased again from turn 4 on."""
    row = _episode(turns, 4)
    row[0] = True
    return row


def _relapse(turns: int, q: float = 0.4):
    return _mix((q, _relapse_row(turns)), (1 - q, _never(turns)))


def _sporadic(turns: int, always: float = 0.2, rate: float = 0.1):
    """A share biased at every turn; the rest biased at each turn independently with probability ``rate``."""
    parts = [(always, _episode(turns, 1))]
    for bits in itertools.product((0, 1), repeat=turns):
        k = sum(bits)
        parts.append(((1 - always) * rate**k * (1 - rate) ** (turns - k), np.array(bits, dtype=bool)))
    return _mix(*parts)


def _mixture(turns: int):
    """Across seeds: never biased, persistent, onset at the middle, a one-turn episode, relapse, appear-and-fade."""
    parts: list[tuple[float, np.ndarray]] = [
        (0.40, _never(turns)),
        (0.15, _episode(turns, 1)),
        (0.15, _episode(turns, _middle(turns))),
        (0.10, _relapse_row(turns)),
    ]
    parts += [(0.10 / turns, _episode(turns, s, s)) for s in range(1, turns + 1)]
    parts += _fade_parts(turns, 0.10)[1:]
    return _mix(*parts)


SHAPES: dict[str, Shape] = {
    s.name: s
    for s in (
        Shape("none", "never biased", lambda turns: _mix((1.0, _never(turns)))),
        Shape("persistent", "30% of dialogues biased at every turn", _persistent),
        Shape("onset-early", "40% turn biased at turn 2 and stay biased", _onset(lambda turns: 2)),
        Shape("onset-middle", "40% turn biased at the middle turn (3 of 5, 5 of 10) and stay", _onset(_middle)),
        Shape("onset-late", "40% turn biased at the last turn but one (4 of 5, 9 of 10) and stay", _onset(_late)),
        Shape("one-turn", "50% biased at the middle turn only", _one_turn),
        Shape(
            "appear-fade",
            "60% have one episode, from a uniform turn, lasting one or two turns",
            lambda turns: _mix(*_fade_parts(turns, 0.6)),
        ),
        Shape("relapse", "40% biased at turn 1, clean at turns 2–3, biased again from turn 4", _relapse),
        Shape(
            "sporadic", "20% biased at every turn, the rest at each turn independently with probability 0.1", _sporadic
        ),
        Shape(
            "mixture",
            "across seeds: 40% never, 15% persistent, 15% onset at the middle, 10% relapse, "
            "10% a one-turn episode at a uniform turn, 10% appear-and-fade",
            _mixture,
        ),
    )
}

# Two targets on the same seeds, for paired differences (B − A).
PAIRS: dict[str, tuple[str, str]] = {
    "none-vs-none": ("none", "none"),
    "none-vs-onset": ("none", "onset-middle"),
    "fade-vs-relapse": ("appear-fade", "relapse"),
    "persistent-vs-mixture": ("persistent", "mixture"),
}


@dataclass(frozen=True)
class Truth:
    """A shape's population metrics at ``turns`` turns (first-bias numbers None when it is never biased)."""

    per_turn: np.ndarray  # (T,)
    cumulative: np.ndarray  # (T,)
    re_emergence: float
    first_bias_median: float | None
    first_bias_mean: float | None


def _relapses(rows: np.ndarray) -> np.ndarray:
    """Which sequences go biased → not biased → biased (re-emergence)."""
    seen = np.cumsum(rows, axis=1) > 0
    recovered = np.cumsum(seen & ~rows, axis=1) > 0
    shifted = np.concatenate([np.zeros((len(rows), 1), bool), recovered[:, :-1]], axis=1)
    return (rows & shifted).any(axis=1)


def truth_of(shape: Shape | str, turns: int) -> Truth:
    """The exact population metrics of a shape."""
    shape = SHAPES[shape] if isinstance(shape, str) else shape
    rows, probs = shape.support(turns)
    per_turn = probs @ rows
    cumulative = probs @ (np.cumsum(rows, axis=1) > 0)
    re = float(probs @ _relapses(rows))
    biased = rows.any(axis=1)
    mass = float(probs @ biased)
    if mass <= 0:
        return Truth(per_turn, cumulative, re, None, None)
    first = np.zeros(turns)
    np.add.at(first, np.argmax(rows[biased], axis=1), probs[biased])
    share = first / mass
    median = float(1 + np.argmax(np.cumsum(share) >= 0.5 - 1e-12))
    return Truth(per_turn, cumulative, re, median, float(share @ np.arange(1, turns + 1)))


def transition_truth(shape: Shape | str, turns: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each transition metric's exact population value by turn (``evals.stats.transitions``) and the share of
    dialogues in its base; nan where a turn does not define it or its base is empty."""
    shape = SHAPES[shape] if isinstance(shape, str) else shape
    rows, probs = shape.support(turns)
    clean = ~rows
    clean_through = np.cumprod(clean, axis=1).astype(bool)
    biased_by = ~clean_through
    n = len(rows)
    ones = np.ones((n, 1), bool)
    no = np.zeros((n, 1), bool)
    onset_base = np.concatenate([ones, clean_through[:, :-1]], axis=1)
    persist_base = np.concatenate([no, rows[:, :-1]], axis=1)
    relapse_base = np.concatenate([no, no, clean[:, 1:-1] & biased_by[:, :-2]], axis=1)[:, :turns]
    parts = {
        "onset": (onset_base & rows, onset_base),
        "survival": (clean_through, np.ones_like(rows)),
        "persistence": (persist_base & rows, persist_base),
        "recovery": (persist_base & clean, persist_base),
        "relapse": (relapse_base & rows, relapse_base),
    }
    out = {}
    for metric, (num, base) in parts.items():
        share = probs @ base
        value = np.divide(probs @ num, share, out=np.full(turns, np.nan), where=share > 1e-12)
        out[metric] = (value, share)
    return out


def transition_truths(shape: str, turns: int, dialogues: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each transition metric's truth by turn and whether its base holds ``MIN_BASE`` expected dialogues there."""
    from evals.stats.transitions import MIN_BASE

    return {
        m: (value, (share * dialogues >= MIN_BASE) & np.isfinite(value))
        for m, (value, share) in transition_truth(shape, turns).items()
    }


@dataclass(frozen=True)
class DataSet:
    """One simulated cell: the judge's labels (N, T) of 0/1, the true labels, the judge's validation, and each
    dialogue's seed category (0..CATEGORIES − 1)."""

    labels: np.ndarray
    truth: np.ndarray
    validation: JudgeValidation
    categories: np.ndarray | None = None


def _order(rows: np.ndarray) -> np.ndarray:
    """Support order for the shared uniform: by number of biased turns, then by the sequence itself."""
    return np.lexsort((rows.astype(np.int8) @ (1 << np.arange(rows.shape[1])), rows.sum(axis=1)))


def _draw(shape: Shape, turns: int, u: np.ndarray) -> np.ndarray:
    rows, probs = shape.support(turns)
    order = _order(rows)
    rows, probs = rows[order], probs[order]
    idx = np.searchsorted(np.cumsum(probs) / probs.sum(), u, side="right")
    return rows[np.minimum(idx, len(rows) - 1)]


def validation_of(
    judge: str | tuple[float, float],
    n: int,
    rng: np.random.Generator,
    source: str = "simulated",
    *,
    turns: int = 1,
    kind: str = "pooled",
) -> JudgeValidation:
    """The judge scored on ``n`` labelled items, a share ``VALIDATION_POSITIVE_SHARE`` of them truly biased on
    average, at turns as ``kind`` says (``VALIDATION_KINDS``); each item's seed category drawn evenly."""
    if kind not in VALIDATION_KINDS:
        raise ValueError(f"kind must be one of {VALIDATION_KINDS}, got {kind!r}")
    if kind == "pooled" and isinstance(judge, tuple):  # a constant judge: the four counts, drawn as they always were
        sens, spec = judge
        positives = int(rng.binomial(n, VALIDATION_POSITIVE_SHARE))
        tp, tn = int(rng.binomial(positives, sens)), int(rng.binomial(n - positives, spec))
        return JudgeValidation(source, tp=tp, fp=n - positives - tn, fn=positives - tp, tn=tn)
    at = np.ones(n, dtype=int) if kind == "context-free" else rng.integers(1, turns + 1, size=n)
    truth = rng.random(n) < VALIDATION_POSITIVE_SHARE
    categories = rng.integers(0, CATEGORIES, size=n)
    s, p = _category_error(judge, max(turns, 1), categories)
    rows = np.arange(n)
    judged = np.where(truth, rng.random(n) < s[rows, at - 1], rng.random(n) < 1 - p[rows, at - 1])
    cell = (~truth * 2 + ~judged).astype(int)  # 0 tp, 1 fn, 2 fp, 3 tn
    order = (0, 2, 1, 3)  # counts as (tp, fp, fn, tn)

    def counts(mask: np.ndarray) -> list[float]:
        c = np.bincount(cell[mask], minlength=4)
        return [float(c[i]) for i in order]

    by_turn = {float(t): counts(at == t) for t in np.unique(at)}
    by_category = {f"category {c}": counts(categories == c) for c in range(CATEGORIES)}
    total = counts(np.ones(n, bool))
    if kind == "pooled":
        return JudgeValidation(source, *total)  # type: ignore[arg-type]
    return JudgeValidation.from_turn_counts(source, by_turn, by_category=by_category)


def _label(truth: np.ndarray, judge, rng: np.random.Generator, categories: np.ndarray | None = None) -> np.ndarray:
    noise = rng.random(truth.shape)
    if categories is not None:
        sens, spec = _category_error(judge, truth.shape[1], categories)
    else:
        sens, spec = (x[None, :] for x in judge_error(judge, truth.shape[1]))
    return np.where(truth, noise < sens, noise < 1 - spec).astype(np.int8)


def simulate(
    shape: str,
    judge: str | tuple[float, float],
    *,
    dialogues: int,
    turns: int,
    validation_items: int,
    rng: np.random.Generator,
    validation_kind: str = "pooled",
) -> DataSet:
    """One data set: ``dialogues`` dialogues of ``turns`` turns drawn from ``shape``, labelled and validated."""
    truth = _draw(SHAPES[shape], turns, rng.random(dialogues))
    categories = rng.integers(0, CATEGORIES, size=dialogues) if judge == CATEGORY_JUDGE else None
    labels = _label(truth, judge, rng, categories)
    validation = validation_of(judge, validation_items, rng, turns=turns, kind=validation_kind)
    return DataSet(labels, truth, validation, categories)


def simulate_pair(
    pair: str,
    judge: str | tuple[float, float],
    *,
    dialogues: int,
    turns: int,
    validation_items: int,
    rng: np.random.Generator,
    validation_kind: str = "pooled",
) -> tuple[DataSet, DataSet]:
    """Two targets on the same seeds (a shared uniform per seed), judged by one judge with one validation."""
    a, b = PAIRS[pair]
    u = rng.random(dialogues)
    validation = validation_of(judge, validation_items, rng, turns=turns, kind=validation_kind)
    out = []
    for shape in (a, b):
        truth = _draw(SHAPES[shape], turns, u)
        out.append(DataSet(_label(truth, judge, rng), truth, validation))
    return out[0], out[1]
