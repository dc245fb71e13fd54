"""Agreement between raters (two label sets, human annotators, a judge and a gold label), with intervals.

Unparsed and missing labels are excluded pair by pair (and counted); intervals are
seeded percentile bootstraps over items.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from checkpoints.queries import StoreQueries
from evals.stats.metrics import BIASED, NOT_BIASED, Estimate, estimate
from evals.stats.primitives import DEFAULT_EXCLUDE, cohens_kappa, gwet_ac1, gwet_ac1_multi, percent_agreement

BIAS_CATEGORIES: tuple[str, ...] = (BIASED, NOT_BIASED)
Rating = Hashable | None


def _parsed(label: Rating) -> bool:
    return label not in DEFAULT_EXCLUDE


@dataclass(frozen=True)
class Agreement:
    """Two raters on the same items."""

    n_items: int
    n_compared: int  # items both raters labelled (unparsed/missing on either side excluded)
    percent: Estimate
    kappa: Estimate
    ac1: Estimate


def pairwise_agreement(
    a: Sequence[Rating],
    b: Sequence[Rating],
    *,
    categories: Sequence[Hashable] = BIAS_CATEGORIES,
    n_boot: int = 1000,
    seed: int = 0,
) -> Agreement:
    """Percent agreement, Cohen's kappa and Gwet's AC1 (over the declared categories) with bootstrap intervals."""
    if len(a) != len(b):
        raise ValueError(f"raters rated different numbers of items: {len(a)} != {len(b)}")
    pairs = list(zip(a, b))

    def stat(fn):
        def apply(sample: Sequence[tuple[Rating, Rating]]) -> float | None:
            xs = [x for x, _ in sample]
            ys = [y for _, y in sample]
            return fn(xs, ys)

        return apply

    return Agreement(
        n_items=len(pairs),
        n_compared=sum(_parsed(x) and _parsed(y) for x, y in pairs),
        percent=estimate(pairs, stat(percent_agreement), n_boot=n_boot, seed=seed),
        kappa=estimate(pairs, stat(cohens_kappa), n_boot=n_boot, seed=seed),
        ac1=estimate(pairs, stat(lambda x, y: gwet_ac1(x, y, categories=categories)), n_boot=n_boot, seed=seed),
    )


@dataclass(frozen=True)
class MultiAgreement:
    """Several raters (items x raters, missing allowed): Gwet's AC1."""

    n_items: int
    n_raters: int
    n_rated_twice: int  # items with at least two parsed ratings (the ones agreement is measured on)
    ac1: Estimate


def multi_rater_agreement(
    ratings: Sequence[Sequence[Rating]],
    *,
    categories: Sequence[Hashable] = BIAS_CATEGORIES,
    n_boot: int = 1000,
    seed: int = 0,
) -> MultiAgreement:
    items = [tuple(item) for item in ratings]
    return MultiAgreement(
        n_items=len(items),
        n_raters=max([0, *(len(item) for item in items)]),
        n_rated_twice=sum(sum(_parsed(r) for r in item) >= 2 for item in items),
        ac1=estimate(items, lambda s: gwet_ac1_multi(s, categories=categories), n_boot=n_boot, seed=seed),  # type: ignore[arg-type]
    )


def majority(labels: Sequence[Rating]) -> Rating:
    """The label more than half of the parsed ratings give; None for no ratings or a tie."""
    counts = Counter(label for label in labels if _parsed(label))
    if not counts:
        return None
    (top, n), *rest = counts.most_common()
    if rest and rest[0][1] == n:
        return None
    return top


@dataclass(frozen=True)
class Classification:
    """A judge against reference labels, with ``positive`` (biased) as the positive class."""

    n_items: int
    n_compared: int  # both sides parsed
    n_unparsed: int  # items with a reference whose prediction is unparsed or missing
    tp: int
    fp: int
    fn: int
    tn: int
    accuracy: Estimate
    precision: Estimate
    recall: Estimate
    f1: float | None
    kappa: Estimate
    ac1: Estimate


def _confusion(pairs: Sequence[tuple[Rating, Rating]], positive: Hashable) -> tuple[int, int, int, int]:
    tp = fp = fn = tn = 0
    for gold, predicted in pairs:
        if not (_parsed(gold) and _parsed(predicted)):
            continue
        if predicted == positive:
            tp, fp = (tp + 1, fp) if gold == positive else (tp, fp + 1)
        else:
            fn, tn = (fn + 1, tn) if gold == positive else (fn, tn + 1)
    return tp, fp, fn, tn


def _ratio(numerator: int, denominator: int) -> float | None:
    return numerator / denominator if denominator else None


def classification(
    gold: Sequence[Rating],
    predicted: Sequence[Rating],
    *,
    positive: Hashable = BIASED,
    categories: Sequence[Hashable] = BIAS_CATEGORIES,
    n_boot: int = 1000,
    seed: int = 0,
) -> Classification:
    """Accuracy, precision, recall, F1, kappa and AC1 of predictions against reference labels."""
    if len(gold) != len(predicted):
        raise ValueError(f"{len(gold)} reference labels but {len(predicted)} predictions")
    pairs = list(zip(gold, predicted))
    tp, fp, fn, tn = _confusion(pairs, positive)

    def accuracy(sample):
        tp, fp, fn, tn = _confusion(sample, positive)
        return _ratio(tp + tn, tp + fp + fn + tn)

    def precision(sample):
        tp, fp, _, _ = _confusion(sample, positive)
        return _ratio(tp, tp + fp)

    def recall(sample):
        tp, _, fn, _ = _confusion(sample, positive)
        return _ratio(tp, tp + fn)

    p, r = _ratio(tp, tp + fp), _ratio(tp, tp + fn)
    pairwise = pairwise_agreement(gold, predicted, categories=categories, n_boot=n_boot, seed=seed)
    return Classification(
        n_items=len(pairs),
        n_compared=tp + fp + fn + tn,
        n_unparsed=sum(_parsed(g) and not _parsed(x) for g, x in pairs),
        tp=tp,
        fp=fp,
        fn=fn,
        tn=tn,
        accuracy=estimate(pairs, accuracy, n_boot=n_boot, seed=seed),
        precision=estimate(pairs, precision, n_boot=n_boot, seed=seed),
        recall=estimate(pairs, recall, n_boot=n_boot, seed=seed),
        f1=None if p is None or r is None or p + r == 0 else 2 * p * r / (p + r),
        kappa=pairwise.kappa,
        ac1=pairwise.ac1,
    )


def aligned_labels(
    store: StoreQueries, run_ids: Sequence[str], a: str, b: str
) -> tuple[list[str | None], list[str | None]]:
    """The labels of two label sets on the same turns of the given runs, in the same order."""
    xs: list[str | None] = []
    ys: list[str | None] = []
    for run_id in run_ids:
        left = store.label_matrix(run_id, label_set=a)
        right = store.label_matrix(run_id, label_set=b)
        for thread_id, row in left.items():
            other = right.get(thread_id, [])
            for i, label in enumerate(row):
                partner = other[i] if i < len(other) else None
                if label is None and partner is None:
                    continue
                xs.append(label)
                ys.append(partner)
    return xs, ys


def label_set_agreement(
    store: StoreQueries, run_ids: Sequence[str], a: str, b: str, *, n_boot: int = 1000, seed: int = 0
) -> Agreement:
    """Percent agreement, kappa and AC1 between two label sets over the turns of the runs (items = turns)."""
    xs, ys = aligned_labels(store, run_ids, a, b)
    return pairwise_agreement(xs, ys, n_boot=n_boot, seed=seed)
