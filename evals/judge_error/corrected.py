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
from checkpoints.scores import HUMAN_BIAS
from checkpoints.vocabulary import PARSED_LABELS, PRIMARY_LABELS
from evals.judge_error import double_sampling
from evals.judge_error.cells import Cell, encode_cell
from evals.judge_error.correction import DEFAULT_DRAWS, CorrectedRun, correct_encoded, corrected_difference
from evals.judge_error.double_sampling import HUMAN, annotation_counts, human_labels
from evals.judge_error.intervals import interval
from evals.judge_error.planning import DEFAULT_DRIFT, drift_labels, plan_labels
from evals.judge_error.validation import CorrectionRefused, JudgeValidation
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
    at = f" --db {db}" if db else ""
    judge = judge or "SPEC"
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


def _from_annotation(store: StoreQueries, run_id: str, label_set: str) -> ChosenValidation | None:
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
    own = _from_annotation(store, run_id, label_set)
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
        "per_turn": [],
        "cumulative": [],
        "re_emergence": None,
        "first_bias_turn": None,
        "validation": chosen.as_dict(),
        "refusal": reason or chosen.refusal,
    }


def _block(result: CorrectedRun, chosen: ChosenValidation) -> dict[str, Any]:
    return {**result.as_dict(), "validation": chosen.as_dict(), "refusal": None}


def correct_cells(
    cells: Mapping[Any, Sequence[Sequence[str | None]]],
    chosen: ChosenValidation,
    *,
    turns: int | None = None,
    clusters: Mapping[Any, Sequence[Hashable]] | None = None,
    threads: Mapping[Any, Sequence[str]] | None = None,
    draws: int = DEFAULT_DRAWS,
    seed: int = 0,
    categories: Mapping[Any, Sequence[str | None]] | None = None,
) -> dict[Hashable, CorrectedRun | str]:
    """Each cell (target × mode) corrected on shared draws, in one vectorised fit, or the one line saying why not.

    ``threads`` (each cell's thread ids, in the order of its sequences) lets people's labels of a double-sampled
    run enter as known true labels; ``categories`` (each dialogue's seed category) lets each be judged with its
    category's error where the validation shows that it differs (``evals.judge_error.categories``).
    """
    out: dict[Hashable, CorrectedRun | str] = {}
    encoded: dict[Hashable, Cell] = {}
    for key, sequences in cells.items():
        if chosen.refusal is not None or chosen.validation is None:
            out[key] = chosen.refusal or "no validation"
            continue
        known = _known_in(chosen.known, (threads or {}).get(key), sequences)
        try:
            encoded[key] = encode_cell(
                sequences, turns, (clusters or {}).get(key), known or None, (categories or {}).get(key)
            )
        except CorrectionRefused as exc:
            out[key] = str(exc)
    if encoded:
        assert chosen.validation is not None
        results = correct_encoded(list(encoded.values()), [chosen.validation] * len(encoded), draws=draws, seed=seed)
        out.update(zip(encoded, results))
    return {key: out[key] for key in cells}


def _known_in(
    known: Mapping[tuple[str, int], str], threads: Sequence[str] | None, sequences: Sequence[Sequence[str | None]]
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
    cells: Mapping[Any, Sequence[Sequence[str | None]]],
    results: Mapping[Any, CorrectedRun | str],
    chosen: ChosenValidation,
) -> dict[str, Any]:
    """The whole run's block: one cell as it is; several cells as their mean weighted by dialogues, draw by draw.

    The model is fitted per cell (a target in a mode); pooling the cells' draws keeps each draw's shared
    validation values and seed-level bootstrap weights, so the pooled interval carries both uncertainties.
    """
    refused = {k: r for k, r in results.items() if isinstance(r, str)}
    fitted: _Fitted = [(r, cells[k]) for k, r in results.items() if not isinstance(r, str)]
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
_Fitted = list[tuple[CorrectedRun, Sequence[Sequence[str | None]]]]


def _reach(rows: Sequence[Sequence[str | None]], t: int) -> int:
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


# --------------------------------------------------------------------------- text


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.0f}%"


def interval_text(entry: dict[str, Any] | None, key: str = "rate") -> str:
    """ "33% [22–45]" from a {rate, ci95} entry (or "–")."""
    if not entry or entry.get(key) is None:
        return "–"
    low, high = entry["ci95"]
    return _pct(entry[key]) + ("" if low is None or high is None else f" [{100 * low:.0f}–{100 * high:.0f}]")


def validation_line(block: dict[str, Any]) -> str:
    """Which validation a block used, its size, sensitivity and specificity with 95% intervals, in one line."""
    v = block.get("validation")
    if not v:
        return ""

    def rate(entry: dict[str, Any]) -> str:
        low, high = entry["ci95"]
        return "–" if entry["value"] is None else f"{entry['value']:.2f} [{low:.2f}, {high:.2f}]"

    line = (
        f"corrected with {v['kind'] or 'a'} validation {v['source']}: {v['what']}; n={v['n']} (TP/FP/FN/TN "
        f"{v['tp']}/{v['fp']}/{v['fn']}/{v['tn']}), sensitivity {rate(v['sensitivity'])}, specificity "
        f"{rate(v['specificity'])}"
    )
    return line + (f"; {v['note']}" if v.get("note") else "")


def drift_line(block: dict[str, Any]) -> str:
    """One line: how much the judge's error changes from the first validated turn to the last (or why that is not
    known)."""
    drift = block.get("judge_drift")
    if not drift:
        return ""
    parts = []
    for name in ("sensitivity", "specificity"):
        c = drift.get(name)
        if c:
            low, high = c["ci95"]
            parts.append(f"{name} {c['change']:+.2f} [{low:+.2f}, {high:+.2f}]")
    span = f" from turn {drift['first_turn']} to {drift['last_turn']}: " + ", ".join(parts) if parts else ""
    return f"judge drift: {drift['verdict']}{span} ({drift['reason']})"


def beyond_fix(run_id: str, db: str | None = None, *, sample: int = 150) -> str:
    """The commands that label replies at every turn of a run, so its judge is validated where its numbers rest."""
    at = f" --db {shlex.quote(db)}" if db else ""
    run = shlex.quote(run_id)
    return (
        f"label replies at every turn: python -m evals.annotate export --run-id {run} --design active --sample "
        f"{sample} --out more.csv{at}, then python -m evals.annotate validate more.csv --run-id {run}{at}"
    )


def flag_lines(block: dict[str, Any]) -> list[str]:
    """The flags of a block's numbers past the validated turns: why (one line), and the fix when the block has one."""
    beyond = block.get("beyond_validation")
    if not beyond or not beyond.get("flagged"):
        return []
    note = (block.get("unreliable") or {}).get("per_turn") or next(iter((block.get("unreliable") or {}).values()), "")
    lines = [note.split(" (label replies")[0] if block.get("fix") else note]
    if block.get("fix"):
        lines.append(block["fix"])
    return lines


def annotation_report(store: StoreQueries, run_id: str, *, label_set: str = PRIMARY_LABELS) -> list[tuple[str, str]]:
    """After ``evals.annotate validate``: the run's human-label validation, and whether it can correct (lines,
    styles)."""
    own = _from_annotation(store, run_id, label_set)
    if own is None:
        return [("no human label of this run matches a parsed judge label: nothing validates its judge yet", "yellow")]
    lines = [(f"judge of run {run_id} ({label_set}) against people: {own.validation.describe()}", "")]  # type: ignore[union-attr]
    turns = run_cells(store, run_id, label_set=label_set)[1]
    drift = own.validation.drift(turns)  # type: ignore[union-attr]
    lines.append((drift.describe(), "yellow" if drift.verdict == "drift" else "dim"))
    if own.refusal:
        lines.append((own.refusal, "yellow"))
    else:
        lines.append(
            (
                "run summaries and reports of this run now show bias rates corrected with it "
                f"(python -m evals.report --run-id {run_id} --out DIR)",
                "dim",
            )
        )
    return lines


def plan_lines(
    store: StoreQueries,
    run_id: str,
    *,
    width: float,
    label_set: str = PRIMARY_LABELS,
    compare: tuple[str, str] | None = None,
    drift: float = DEFAULT_DRIFT,
) -> list[tuple[str, str]]:
    """``evals.annotate plan``: how many more human labels bring the corrected cumulative interval to ``width``
    (with ``compare``, two targets or modes: the interval of their paired difference B − A), the validation's drift
    check, and how many labels tell a change of ``drift`` in the judge's error over the turns.

    Raises CorrectionRefused (its message the one line to show) when no validation can carry a plan, ValueError
    when ``compare`` names no two targets or modes of the run.
    """
    chosen = choose_validation(store, run_id, label_set=label_set)
    if chosen.validation is None or chosen.refusal is not None:
        raise CorrectionRefused(chosen.refusal or "no validation")
    found, turns = run_cells(store, run_id, label_set=label_set)
    cells = found.sequences
    known = {key: k for key in cells if (k := _known_in(chosen.known, found.threads.get(key), cells[key]))}
    pairs = double_sampling.compared_pairs(list(cells), *compare) if compare else None
    plan = plan_labels(
        cells,
        chosen.validation,
        width=width,
        turns=turns,
        clusters=found.clusters,
        known=known or None,
        compare=pairs,
    )
    lines = [(f"validation: {chosen.validation.describe()} — {chosen.what}", "dim"), (plan.describe(), "")]
    check = chosen.validation.drift(turns)
    lines.append((check.describe(), "yellow" if check.verdict != "flat" else "dim"))
    labelled_now = len(store.run_scores(run_id, key=HUMAN_BIAS, scorer=HUMAN))
    lines.append(
        (
            drift_labels(cells, chosen.validation, change=drift, turns=turns, labelled=labelled_now).describe(),
            "",
        )
    )
    if plan.extra_labels:
        at = f" --db {store.path}" if getattr(store, "path", None) else ""
        labelled = len(store.run_scores(run_id, key=HUMAN_BIAS, scorer=HUMAN))
        judged = sum(1 for rows in cells.values() for row in rows for x in row if x in PARSED_LABELS)
        left = judged - labelled
        if plan.extra_labels > left:
            lines.append(
                (
                    f"this run has only {left} judged turns people have not labelled: label them all, and play more "
                    "seeds (or samples) for the rest",
                    "yellow",
                )
            )
        lines.append(
            (
                f"draw them: python -m evals.annotate export --run-id {run_id} --design random --sample "
                f"{min(plan.extra_labels, left)} --seed 1 --out more.csv{at}, then python -m evals.annotate validate "
                f"more.csv --run-id {run_id}{at}",
                "dim",
            )
        )
        if chosen.kind == PAIRS:
            lines.append(
                (
                    "(the plan adds labels to the current evals.judge validation; once this run has its own human "
                    "labels, they become its validation instead)",
                    "dim",
                )
            )
    return lines


def run_cells(store: StoreQueries, run_id: str, *, label_set: str = PRIMARY_LABELS) -> tuple[Cells, int]:
    """The run's label sequences by (target, mode) and its number of turns."""
    found = double_sampling.run_cells(store, run_id, label_set=label_set)
    return Cells(found.sequences, found.clusters, found.threads), found.turns


@dataclass(frozen=True)
class Cells:
    """A run's label sequences by (target, mode), with each dialogue's seed id (the bootstrap's cluster) and thread
    id."""

    sequences: dict[tuple[str, str], list[list[str | None]]]
    clusters: dict[tuple[str, str], list[str]]
    threads: dict[tuple[str, str], list[str]]
    categories: dict[tuple[str, str], list[str | None]] = field(default_factory=dict)


def cells_of(
    dialogues: Sequence[dict[str, Any]], matrix: Mapping[str, Sequence[str | None]], *, default_target: str | None
) -> Cells:
    """Label sequences by (target, mode), in the order of ``dialogues``."""
    cells = Cells({}, {}, {})
    for d in dialogues:
        if d["thread_id"] not in matrix:
            continue
        key = (d.get("target") or default_target or "", d["mode"])
        cells.sequences.setdefault(key, []).append(list(matrix[d["thread_id"]]))
        cells.clusters.setdefault(key, []).append(d.get("seed_id") or d["thread_id"])
        cells.threads.setdefault(key, []).append(d["thread_id"])
        cells.categories.setdefault(key, []).append(d.get("category"))
    return cells
