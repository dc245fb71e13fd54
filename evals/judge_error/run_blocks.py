"""Bias rates corrected for the judge's error where they are shown: which validation a run's judge has, and the blocks.

A run's judge is validated either by people's labels of a random draw of the run's own judged turns
(double sampling: ``evals.annotate export --design random`` then ``validate``), or by an ``evals.judge``
score on labelled pairs recorded for the same judge spec and prompt hash. The first is preferred (same
replies, same distribution); the second is used when the run has none, or when the first cannot correct.
The correction itself is :mod:`evals.judge_error.correction` (per target × mode cell); this module turns it into
the ``judge_corrected`` blocks of the run summary, the report and the notebook API, with one line
saying why when there is none.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from checkpoints.queries import StoreQueries
from checkpoints.vocabulary import PARSED_LABELS, PRIMARY_LABELS
from evals.judge_error.cells import Cell, with_known
from evals.judge_error.codes import RowLike
from evals.judge_error.correction import DEFAULT_DRAWS, CorrectedRun, correct_cells, corrected_difference
from evals.judge_error.double_sampling import annotation_counts, human_labels
from evals.judge_error.intervals import interval
from evals.judge_error.validation import CorrectionRefused, JudgeValidation
from evals.metric_registry import DIALOGUE_METRICS, METRIC
from evals.scorers.judge_pairs import items_validation
from evals.scorers.judge_validation import find_validation, run_validation, stored_items

ANNOTATION, PAIRS = "annotation", "pairs"
SHARED_ERROR_NOTE = (
    "Raw differences between two groups judged by the same judge are shrunk toward zero by its error "
    "(both sides share it); the corrected difference removes that shrinkage, with the validation's uncertainty in "
    "its interval."
)


@dataclass(frozen=True)
class ChosenValidation:
    """The validation a run's bias rates are corrected with, or the one line saying why they are not."""

    validation: JudgeValidation | None
    kind: str | None  # ANNOTATION | PAIRS | None
    what: str  # where the validation's labels came from, for people
    refusal: str | None  # None: corrected numbers can be given
    note: str | None = None  # e.g. why the run's own human labels were passed over
    # Double sampling: (thread, turn) -> people's label of that reply; its truth is then known, not inferred.
    known: dict[tuple[str, int], str] = field(default_factory=dict, compare=False, repr=False)

    def as_dict(self) -> dict[str, Any] | None:
        """The ``validation`` entry of a ``judge_corrected`` block (None without a validation)."""
        if self.validation is None:
            return None
        return {
            **self.validation.as_dict(),
            "kind": self.kind,
            "what": self.what,
            **({"note": self.note} if self.note else {}),
        }


def how_to_validate(judge: str | None, run_id: str, db: str | None = None) -> str:
    """The one line for an unvalidated judge: raw numbers only, and the exact commands that validate it."""
    at = f" --db {shlex.quote(db)}" if db else ""
    judge, run_id = shlex.quote(judge or "SPEC"), shlex.quote(run_id)  # every printed command works when copied
    return (
        f"no judge-corrected rates: judge {judge} is unvalidated, so these are raw judge labels; validate it with "
        f"python -m evals.judge PAIRS.jsonl --judge-model {judge}{at} (labelled pairs, same --judge-prompt), or "
        "label a "
        f"random draw of this run: python -m evals.annotate export --run-id {run_id} --design random --sample 200 "
        f"--out sample.csv{at}, then python -m evals.annotate validate sample.csv --run-id {run_id}{at}"
    )


def _judge_of(store: StoreQueries, run_id: str, label_set: str) -> dict[str, Any]:
    """{"judge_model", "prompt_hash", "validation"} of the judge behind ``label_set`` (the run's own, or a
    re-judging)."""
    if label_set == PRIMARY_LABELS:
        return run_validation(store, run_id)
    row = next((r for r in store.label_set_rows(run_id, "bias") if r["name"] == label_set), None) or {}
    model, digest = row.get("model"), row.get("prompt_hash")
    return {"judge_model": model, "prompt_hash": digest, "validation": find_validation(store, model, digest)}


def _from_pairs(entry: dict[str, Any]) -> ChosenValidation | None:
    row = entry.get("validation")
    if not row:
        return None
    judge, digest = entry.get("judge_model"), (entry.get("prompt_hash") or "")[:12]
    what = (
        f"evals.judge on {row.get('file')} ({row.get('n_items')} labelled pairs, "
        f"{str(row.get('created_at') or '')[:10]})"
    )
    if any(row.get(k) is None for k in ("tp", "fp", "fn", "tn")):
        return ChosenValidation(
            None,
            PAIRS,
            what,
            refusal=(
                f"no judge-corrected rates: the evals.judge score of {judge} was recorded before its true/false "
                "positive counts "
                f"were kept; score it again: python -m evals.judge {row.get('file')} --judge-model {judge}"
            ),
        )
    source = f"evals.judge:{judge}@{digest}"
    items = stored_items(row)
    validation = (
        JudgeValidation(source=source, tp=row["tp"], fp=row["fp"], fn=row["fn"], tn=row["tn"])
        if items is None
        else items_validation(source, items)
    )
    return ChosenValidation(validation, PAIRS, what, refusal=validation.refusal())


def annotation_validation(store: StoreQueries, run_id: str, label_set: str) -> ChosenValidation | None:
    found = annotation_counts(store, run_id, label_set=label_set)
    if found is None or found[0].n == 0:
        return None
    counts, draws = found
    validation = counts.validation(f"annotate:{run_id}")
    what = (
        f"{counts.n} human labels of a random draw of this run's judged turns "
        f"({'; '.join(draws) or 'draw not recorded'})"
    )
    return ChosenValidation(
        validation, ANNOTATION, what, refusal=validation.refusal(), known=human_labels(store, run_id)
    )


def choose_validation(store: StoreQueries, run_id: str, *, label_set: str = PRIMARY_LABELS) -> ChosenValidation:
    """The run's own human labels (double sampling) if they can correct, else the judge's evals.judge score, else a
    refusal."""
    entry = _judge_of(store, run_id, label_set)
    own = annotation_validation(store, run_id, label_set)
    external = _from_pairs(entry)
    if own is not None and own.refusal is None:
        return own
    if external is not None and external.refusal is None:
        if own is not None:
            return ChosenValidation(
                external.validation,
                external.kind,
                external.what,
                None,
                note=f"the run's own human labels were not used: {own.refusal}",
            )
        return external
    if own is not None:
        return own
    if external is not None:
        return external
    return ChosenValidation(
        None,
        None,
        "",
        refusal=how_to_validate(entry.get("judge_model"), run_id, getattr(store, "path", None) and str(store.path)),
    )


# --------------------------------------------------------------------------- blocks


def refused_block(chosen: ChosenValidation, reason: str | None = None) -> dict[str, Any]:
    """A ``judge_corrected`` block with no numbers: the raw ones stand alone, and ``refusal`` says why."""
    return {
        **{key: [] if METRIC[key].by_turn else None for key in DIALOGUE_METRICS},
        "validation": chosen.as_dict(),
        "refusal": reason or chosen.refusal,
    }


def _block(result: CorrectedRun, chosen: ChosenValidation) -> dict[str, Any]:
    return {**result.as_dict(), "validation": chosen.as_dict(), "refusal": None}


def correct_run_cells(
    cells: Mapping[Any, Cell], chosen: ChosenValidation, *, draws: int = DEFAULT_DRAWS, seed: int = 0
) -> dict[Hashable, CorrectedRun | str]:
    """A run's cells corrected with its chosen validation (``correction.correct_cells``), or per cell the one line
    saying why not.

    People's labels of a double-sampled run (``chosen.known``) enter as known true labels, matched to each cell's
    dialogues by its ``threads``; a cell's ``categories`` let each dialogue be judged with its category's error.
    """
    if chosen.refusal is not None or chosen.validation is None:
        return {key: chosen.refusal or "no validation" for key in cells}
    people = {key: known_in(chosen.known, cell.threads, cell.labels) for key, cell in cells.items()}
    fitted = correct_cells(with_known(cells, people), chosen.validation, draws=draws, seed=seed)
    return {key: str(r) if isinstance(r, CorrectionRefused) else r for key, r in fitted.items()}


def known_in(
    known: Mapping[tuple[str, int], str], threads: Sequence[str] | None, sequences: Sequence[RowLike]
) -> dict[tuple[int, int], str]:
    """People's labels of one cell's replies, keyed (dialogue index in the cell, turn) as evals.judge_error takes
    them."""
    if not known or not threads:
        return {}
    index = {thread: i for i, thread in enumerate(threads)}
    return {
        (index[thread], turn): label
        for (thread, turn), label in known.items()
        if thread in index and 1 <= turn <= len(sequences[index[thread]])
    }


def cell_block(result: CorrectedRun | str, chosen: ChosenValidation) -> dict[str, Any]:
    """One cell's ``judge_corrected`` block (summary shape), or a refused one."""
    return refused_block(chosen, result) if isinstance(result, str) else _block(result, chosen)


def pooled_block(
    cells: Mapping[Any, Cell],
    results: Mapping[Any, CorrectedRun | str],
    chosen: ChosenValidation,
) -> dict[str, Any]:
    """The whole run's block: one cell as it is; several cells as their mean weighted by dialogues, draw by draw.

    The model is fitted per cell (a target in a mode); pooling the cells' draws keeps each draw's shared
    validation values and seed-level bootstrap weights, so the pooled interval carries both uncertainties.
    """
    refused = {k: r for k, r in results.items() if isinstance(r, str)}
    fitted: _Fitted = [(r, cells[k].labels) for k, r in results.items() if not isinstance(r, str)]
    if not fitted:
        return refused_block(chosen, next(iter(refused.values()), chosen.refusal))
    if len(fitted) == 1 and not refused:
        return _block(fitted[0][0], chosen)
    # A cell without a parsed label counts in no raw rate either; the pooled numbers leave it out and say so.
    left_out = "; ".join(
        f"{' · '.join(map(str, k)) if isinstance(k, tuple) else k} left out ({r})" for k, r in refused.items()
    )
    turns = max(r.turns for r, _ in fitted)

    per_turn, cumulative = _pooled_series(fitted, "per_turn", turns), _pooled_series(fitted, "cumulative", turns)
    _keep_boundaries(fitted, per_turn, cumulative, turns)
    re = _combine(
        [r.re_emergence.value for r, _ in fitted],
        [r.draws.re_emergence for r, _ in fitted],
        [r.n_dialogues for r, _ in fitted],
    )
    if _every(fitted, lambda b: b.no_re_emergence):
        _extend(re, low=0.0)
    return {
        "per_turn": per_turn,
        "cumulative": cumulative,
        "re_emergence": re,
        "first_bias_turn": None,
        "dialogues": sum(r.n_dialogues for r, _ in fitted),
        "draws": int(fitted[0][0].draws.per_turn.shape[0]),
        "validation": chosen.as_dict(),
        "refusal": None,
        **_pooled_flags(fitted, per_turn, cumulative),
        "method": "fitted per target × mode (docs/judge-error.md), pooled as the dialogue-weighted mean of the cells",
        **({"note": left_out} if left_out else {}),
    }


def _pooled_flags(fitted: _Fitted, per_turn: list[dict[str, Any]], cumulative: list[dict[str, Any]]) -> dict[str, Any]:
    """A pool's flags: a number is flagged where any cell's is (the pool rests on every cell), turns joined."""
    notes: dict[str, str] = {}
    turns: dict[str, set[int] | None] = {}
    for r, _ in fitted:
        block = r.as_dict()
        for metric, note in block["unreliable"].items():
            notes.setdefault(metric, note)
            held = block["unreliable_turns"].get(metric)
            if metric not in turns:
                turns[metric] = None if held is None else set(held)
            elif turns[metric] is not None:
                turns[metric] = None if held is None else turns[metric] | set(held)  # type: ignore[operator]
    for metric, series in (("per_turn", per_turn), ("cumulative", cumulative)):
        if metric in notes:
            for row in series:
                if turns[metric] is None or row["turn"] in turns[metric]:  # type: ignore[operator]
                    row["unreliable"] = True
    beyond = next((b for r, _ in fitted if (b := r.as_dict()["beyond_validation"]) and b["flagged"]), None)
    return {
        "unreliable": notes,
        "unreliable_turns": {m: sorted(t) for m, t in turns.items() if t is not None},
        "judge_drift": fitted[0][0].as_dict()["judge_drift"],
        "judge_by_category": next((r.by_category for r, _ in fitted if r.by_category), None),
        "beyond_validation": beyond or next((b for r, _ in fitted if (b := r.as_dict()["beyond_validation"])), None),
    }


# The cells of a pooled block: each fitted cell with its label rows.
_Fitted = list[tuple[CorrectedRun, Sequence[RowLike]]]


def _reach(rows: Sequence[RowLike], t: int) -> int:
    """The dialogues of a cell that reach turn ``t`` (0-based) with a label there and a parsed label somewhere."""
    return sum(1 for row in rows if len(row) > t and row[t] is not None and any(x in PARSED_LABELS for x in row))


def _combine(points: list[float | None], draws: list[np.ndarray], weights: list[float]) -> dict[str, Any]:
    """The cells' weighted mean rate, its interval from their draws averaged draw by draw with the same weights."""
    kept = [(p, d, w) for p, d, w in zip(points, draws, weights) if p is not None and w > 0]
    if not kept:
        return {"rate": None, "ci95": [None, None]}
    total = sum(w for _, _, w in kept)
    point = sum(p * w for p, _, w in kept) / total
    values = sum(d * w for _, d, w in kept) / total
    low, high = interval(values, point)  # type: ignore[arg-type]  # the same 95% rule as each cell's
    return {"rate": point, "ci95": [low, high]}


def _pooled_series(fitted: _Fitted, name: str, turns: int) -> list[dict[str, Any]]:
    """The pooled per-turn or cumulative rate at each turn: per turn weighted by dialogues reaching it, else by all."""
    rows = []
    for t in range(turns):
        points, draws, weights = [], [], []
        for r, seqs in fitted:
            if t < r.turns:
                points.append(getattr(r, name)[t].rate)
                draws.append(getattr(r.draws, name)[:, t])
                weights.append(_reach(seqs, t) if name == "per_turn" else r.n_dialogues)
        rows.append({"turn": t + 1, **_combine(points, draws, weights)})  # type: ignore[arg-type]
    return rows


def _every(fitted: _Fitted, test: Callable[[Any], bool]) -> bool:
    """A boundary every cell keeps keeps the pool at it too (each cell's rate can be at it at once)."""
    return all(r.boundaries is not None and test(r.boundaries) for r, _ in fitted)


def _extend(entry: dict[str, Any], low: float | None = None, high: float | None = None) -> None:
    lo, hi = entry["ci95"]
    if lo is None or hi is None:
        return
    entry["ci95"] = [lo if low is None else min(lo, low), hi if high is None else max(hi, high)]


def _keep_boundaries(
    fitted: _Fitted, per_turn: list[dict[str, Any]], cumulative: list[dict[str, Any]], turns: int
) -> None:
    """Widen the pooled intervals to 0, 1 or a flat stretch wherever every cell's own interval reaches it."""
    for t in range(turns):
        if _every(fitted, lambda b: t < len(b.per_turn_zero) and b.per_turn_zero[t]):  # noqa: B023 - called at once
            _extend(per_turn[t], low=0.0)
        if _every(fitted, lambda b: t < len(b.per_turn_one) and b.per_turn_one[t]):  # noqa: B023 - called at once
            _extend(per_turn[t], high=1.0)
        if _every(fitted, lambda b: t < len(b.cumulative_zero) and b.cumulative_zero[t]):  # noqa: B023 - called at once
            _extend(cumulative[t], low=0.0)
        for s in range(t):  # flat from turn s+1 to t+1 in every cell: the pool's cumulative may be flat too
            if _every(fitted, lambda b: b.flat_between(s, t)):  # noqa: B023 - called at once
                _extend(cumulative[t], low=cumulative[s]["ci95"][0])


def difference_block(a: CorrectedRun | str, b: CorrectedRun | str) -> dict[str, Any]:
    """B − A of two corrected cells (paired on seeds, shared validation draws), or the reason there is none."""
    if isinstance(a, str) or isinstance(b, str):
        return {"refusal": a if isinstance(a, str) else b}
    return {
        **corrected_difference(a, b).as_dict(),
        "validation": a.validation.as_dict(),
        "refusal": None,
        "note": SHARED_ERROR_NOTE,
    }
