"""How bias moves between turns, where results are shown: the report's table by target × mode, paired differences,
and the rows of a DataFrame (metrics: ``evals.stats.transitions``, corrected: ``evals.judge_error.transitions``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from evals.judge_error.cells import Cell
from evals.judge_error.run_blocks import ChosenValidation, cell_block, correct_run_cells
from evals.metric_registry import METRIC
from evals.metric_registry import TRANSITION_METRICS as METRICS
from evals.report.tables import TableData
from evals.stats.transitions import MIN_BASE, TOO_FEW, raw_transitions

NAMES = {m: METRIC[m].label for m in METRICS}  # as every surface heads them (evals.metric_registry)
TRANSITIONS_NOTE = (
    "How bias moves from turn to turn (docs/concepts.md#bias-dynamics). *Onset hazard*: of the dialogues clean "
    "through turn t − 1, the share biased at t. *Clean so far*: the share with no biased reply in turns 1..t "
    "(1 − cumulative bias). *Persistence*: of the replies biased at t − 1, the share biased at t; *recovery* "
    "the share clean (1 − persistence). *Relapse*: of the dialogues clean at t − 1 after a biased reply earlier, "
    "the share biased at t. Raw: from the judge's labels, counting a dialogue only where the labels a rate "
    "conditions on are parsed (base in brackets), 95% seed-bootstrap intervals. Corrected: the same probabilities "
    "of the true labels, from the correction's draws (judge error by turn and seeds), base an expected count. "
    f"A base of fewer than {MIN_BASE} dialogues shows *{TOO_FEW}*."
)
TRANSITION_COLUMNS = (
    "run_id",
    "target_model",
    "mode",
    "metric",
    "turn",
    "kind",
    "rate",
    "low",
    "high",
    "base",
    "too_few",
)


def rate_text(entry: Mapping[str, Any] | None, key: str = "rate", *, signed: bool = False) -> str:
    """ "38% [31–45]", "too few dialogues", or "–" (no such turn)."""
    if not entry:
        return "–"
    if entry.get("too_few"):
        return TOO_FEW
    value = entry.get(key)
    if value is None:
        return "–"
    low, high = entry["ci95"]
    fmt = "{:+.0f}" if signed else "{:.0f}"
    text = fmt.format(100 * value) + ("" if signed else "%")
    return text + ("" if low is None or high is None else f" [{fmt.format(100 * low)}–{fmt.format(100 * high)}]")


def _at(block: Mapping[str, Any] | None, metric: str, turn: int) -> Mapping[str, Any] | None:
    return next((e for e in (block or {}).get(metric) or () if e["turn"] == turn), None)


def _turns(*blocks: Mapping[str, Any] | None) -> int:
    return max([1, *(e["turn"] for b in blocks if b for m in METRICS for e in b.get(m) or ())])


def unreliable_line(block: Mapping[str, Any] | None) -> str:
    """One line naming the flagged corrected metrics of a block and why ("" when none is)."""
    flagged = (block or {}).get("unreliable") or {}
    if not flagged:
        return ""
    notes = list(dict.fromkeys(flagged.values()))
    return f"Corrected {', '.join(NAMES[m] for m in flagged)}: " + "; ".join(notes) + "."


def transition_table(title: str, raw: Mapping[str, Any], corrected: Mapping[str, Any] | None) -> TableData:
    """One cell's transitions by turn: each metric raw (with its base) and, where the judge is validated, corrected."""
    headers = ["turn"]
    for m in METRICS:
        headers += [f"{NAMES[m]} raw"] + ([f"{NAMES[m]} corrected"] if corrected else [])
    rows = []
    for t in range(1, _turns(raw, corrected) + 1):
        cells = [str(t)]
        for m in METRICS:
            entry = _at(raw, m, t)
            base = "" if not entry or entry.get("too_few") or m == "survival" else f" ({entry['base']:g})"
            cells.append(rate_text(entry) + base)
            if corrected:
                cells.append(rate_text(_at(corrected, m, t)))
        rows.append(tuple(cells))
    return TableData(title, tuple(headers), tuple(rows), left=1)


def difference_table(title: str, diff: Mapping[str, Any]) -> TableData:
    """B − A of every transition metric by turn, in percentage points with the paired 95% interval."""
    rows = [
        (str(t), *(rate_text(_at(diff, m, t), "diff", signed=True) for m in METRICS))
        for t in range(1, _turns(diff) + 1)
    ]
    return TableData(title, ("turn", *(f"Δ {NAMES[m]}, pts" for m in METRICS)), tuple(rows), left=1)


def records(
    run_id: str | None, target: str, mode: str, block: Mapping[str, Any] | None, kind: str
) -> list[dict[str, Any]]:
    """A transitions block as rows of TRANSITION_COLUMNS."""
    key = "diff" if kind == "difference" else "rate"
    return [
        {
            "run_id": run_id,
            "target_model": target,
            "mode": mode,
            "metric": m,
            "turn": e["turn"],
            "kind": kind,
            "rate": e.get(key),
            "low": e["ci95"][0],
            "high": e["ci95"][1],
            "base": e["base"],
            "too_few": bool(e.get("too_few")),
        }
        for m in METRICS
        for e in (block or {}).get(m) or ()
    ]


def transition_records(
    dataset: Any, validations: Mapping[str, ChosenValidation], *, n_boot: int = 1000, seed: int = 0
) -> list[dict[str, Any]]:
    """One row per (run, target, mode) × metric × turn × raw/corrected, with 95% intervals and bases."""
    by_cell: dict[tuple[str, str, str], list] = {}
    for d in dataset.dialogues:
        by_cell.setdefault((d.run_id, d.model, d.mode), []).append(d)
    out: list[dict[str, Any]] = []
    for (run_id, target, mode), members in by_cell.items():
        rows = [list(d.labels) for d in members]
        seeds = [d.seed_id or d.thread_id for d in members]
        turns = max([1, *(len(r) for r in rows)])
        raw, _ = raw_transitions(rows, turns, clusters=seeds, draws=n_boot, seed=seed)
        out += records(run_id, target, mode, raw.as_dict(), "raw")
        chosen = validations.get(run_id) or ChosenValidation(None, None, "", "no validation was looked up")
        key = (target, mode)
        cell = Cell(rows, seeds, [d.thread_id for d in members])
        result = correct_run_cells({key: cell}, chosen, seed=seed)[key]
        out += records(run_id, target, mode, cell_block(result, chosen).get("transitions"), "corrected")
    return out


def group_transitions(
    groups: Mapping[tuple[str, str], Sequence[Any]], *, n_boot: int = 1000, seed: int = 0
) -> dict[tuple[str, str], dict[str, Any]]:
    """Each (target, mode)'s raw transitions block from its dialogues (clustered by seed)."""
    out = {}
    for key, members in groups.items():
        rows = [list(d.labels) for d in members]
        turns = max([1, *(len(r) for r in rows)])
        seeds = [d.seed_id or d.thread_id for d in members]
        out[key] = raw_transitions(rows, turns, clusters=seeds, draws=n_boot, seed=seed)[0].as_dict()
    return out


def markdown_blocks(
    raw: Mapping[tuple[str, str], Mapping[str, Any]],
    corrected: Mapping[tuple[str, str], Mapping[str, Any]],
) -> list[str | TableData]:
    """report.md's section: the note, then per (target, mode) its table."""
    if not raw:
        return []
    parts: list[str | TableData] = ["## Bias dynamics: onset, persistence, recovery, relapse", TRANSITIONS_NOTE]
    for (target, mode), block in raw.items():
        fixed = (corrected.get((target, mode)) or {}).get("transitions")
        table = transition_table(f"{target} · {mode}", block, fixed)
        parts += [f"### {table.title}", table]
        if note := unreliable_line(fixed):
            parts.append(note)
        if not fixed:
            why = (corrected.get((target, mode)) or {}).get("refusal")
            parts.append(
                "Raw only: " + (why or "the corrected transitions are given per run (report one run at a time).")
            )
    return parts


def set_transitions(
    pairs: Sequence[Any], chosen: ChosenValidation, *, n_boot: int = 1000, seed: int = 0
) -> dict[str, Any]:
    """Branches − parents of a counterfactual set: every transition metric by turn, raw and corrected, paired.

    Each branch and its parent share one bootstrap key (the parent thread), so a resample keeps them together and
    the corrected sides share their validation draws: the difference is paired as the set's other numbers are.
    """
    from evals.judge_error.correction import corrected_difference
    from evals.stats.transitions import raw_rate_draws, transition_difference

    parents = [list(p.parent_labels) for p in pairs]
    branches = [list(p.branch_labels) for p in pairs]
    keys = [p.parent for p in pairs]
    turns = max([1, *(len(r) for r in parents + branches)])
    raw_a, draws_a = raw_transitions(parents, turns, clusters=keys, draws=n_boot, seed=seed)
    raw_b, draws_b = raw_transitions(branches, turns, clusters=keys, draws=n_boot, seed=seed)
    raw = transition_difference(raw_a, raw_b, raw_rate_draws(draws_a), raw_rate_draws(draws_b))
    pair = {"parents": Cell(parents, keys, turns=turns), "branches": Cell(branches, keys, turns=turns)}
    fitted = correct_run_cells(pair, chosen)
    a, b = fitted["parents"], fitted["branches"]
    if isinstance(a, str) or isinstance(b, str):
        corrected: dict[str, Any] = {"refusal": a if isinstance(a, str) else b}
    else:
        diff = corrected_difference(a, b).transitions
        corrected = {"refusal": None, **(diff.as_dict() if diff else {})}
    return {
        "parents": raw_a.as_dict(),
        "branches": raw_b.as_dict(),
        "difference": raw.as_dict(),
        "judge_corrected": corrected,
        "fork_turn": min(p.fork_turn for p in pairs),
    }
