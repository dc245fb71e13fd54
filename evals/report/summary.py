"""The end-of-run summary as data: per-turn and cumulative bias, unparsed labels, failures, cost, the judge-corrected
rates (evals/report/summary_view.py draws it as tables)."""

from __future__ import annotations

import shlex
from collections import Counter
from collections.abc import Sequence
from typing import Any

from checkpoints.queries import StoreQueries
from checkpoints.run_record import RunRecord, role_specs, run_settings
from evals.cost import Pricing, run_usage, usage_summary
from evals.judge_error.block_texts import beyond_fix
from evals.judge_error.cells import cells_of
from evals.judge_error.run_blocks import cell_block, choose_validation, correct_run_cells, pooled_block
from evals.metric_registry import METRIC
from evals.report.thinking import reasoning_summary, request_summary
from evals.scorers.judge_validation import run_validation
from evals.stats.metrics import summarise
from evals.stats.transitions import raw_transitions
from nodes.leakage import count_leakage
from nodes.verdicts import unread_reason

BASE_MODEL_NOTE = (
    "The embedded model (local:gemma3-270m) is a 270M-parameter base model: it makes the pipeline run "
    "offline, and its numbers are no basis for conclusions about any other model."
)


def run_summary(
    store: StoreQueries,
    run_id: str,
    *,
    outcomes: Sequence[Any] = (),
    calls: dict[str, Any] | None = None,
    pricing: Pricing | None = None,
    budget: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Metrics of one run from the store, plus what happened to each dialogue in this invocation.

    ``calls`` (from graph.run) adds this invocation's response-cache hits and retries; ``pricing``
    the run's cost from its stored tokens; ``budget`` what ``--max-cost`` did.
    """
    run = store.get_run(run_id) or {"config": {}}
    settings = run_settings(run["config"])
    turns = int(settings.get("turns") or 1)
    matrix_by_thread = store.label_matrix(run_id)
    dialogues = store.dialogues(run_id)
    # Repeated samples of a seed are one observation: intervals then resample seeds (clustered).
    seed_of = (
        {d["thread_id"]: d.get("seed_id") or d["thread_id"] for d in dialogues}
        if int(settings.get("samples") or 1) > 1
        else None
    )
    clusters = [seed_of.get(t, t) for t in matrix_by_thread] if seed_of else None
    metrics = summarise(
        list(matrix_by_thread.values()),
        turns,
        n_boot=1000,
        seed=0,
        delta_start=min(5, turns),
        delta_end=turns,
        clusters=clusters,
    )
    failed, paused = _unfinished(dialogues)
    models = role_specs(run["config"])
    targets = (settings.get("models") or {}).get("targets") or [models.get("target")]
    modes = settings.get("modes") or [None]
    summary: dict[str, Any] = {
        "run_id": run_id,
        "db": str(store.path),
        "mode": modes[0],
        "turns": turns,
        "models": models,
        "model_ids": RunRecord.from_stored(run["config"]).resolved.model_ids,
        "dialogues": len(dialogues),
        "finished": sum(1 for d in dialogues if d["status"] == "finished"),
        "failed": failed,
        "paused": paused,
        "skipped_this_time": sum(1 for o in outcomes if o.status == "skipped"),
        **_rates(metrics, list(matrix_by_thread.values()), turns, clusters),
        "unparsed_reasons": unparsed_reasons(store, run_id),
        "unaligned_seeds": run["config"].get("unaligned_seeds", []),
        "notes": [BASE_MODEL_NOTE] if any(str(m).startswith("local:") for m in [*models.values(), *targets]) else [],
        "targets": targets,
        "modes": modes,
        "groups": _groups(dialogues, matrix_by_thread, turns, default_target=models.get("target"), seed_of=seed_of),
        **{key: (calls or {}).get(key) for key in ("cache", "retries", "outages", "concurrency")},
        "samples": int(settings.get("samples") or 1),
        "cost": usage_summary(run_usage(store, run_id), pricing),
        "budget": budget,
        "held_this_time": sum(1 for o in outcomes if o.status == "held"),
        "leakage": run_leakage(store, run_id),
        "non_replies": store.non_replies(run_id),
        "judge_validation": run_validation(store, run_id),
        "reasoning": reasoning_summary(store, run_id, turns=turns, answers=metrics, clusters=clusters),
    }
    summary["requests"], sampling_notes = request_summary(store, run_id, run["config"])
    summary["notes"] += sampling_notes
    _judge_corrected(
        summary, store, run_id, dialogues, matrix_by_thread, turns=turns, default_target=models.get("target")
    )
    if resume := _resume(run_id, shlex.quote(str(store.path)), budget=budget, failed=bool(failed), paused=bool(paused)):
        summary["resume"] = resume
    return summary


def _rates(metrics: Any, rows: list, turns: int, clusters: list | None) -> dict[str, Any]:
    """Per-turn and cumulative bias, re-emergence and the first-bias turn, with their 95% intervals, the unparsed
    labels, and the transitions between turns of the label ``rows`` (evals.stats.transitions)."""
    return {
        "transitions": raw_transitions(rows, turns, clusters=clusters)[0].as_dict(),
        "unparsed_labels": metrics.n_unparsed,
        "per_turn": [
            {
                "turn": t.turn,
                "labelled": t.n_labelled,
                "biased": t.n_biased,
                "unparsed": t.n_unparsed,
                "rate": e.value,
                "ci95": [e.low, e.high],
            }
            for t, e in zip(metrics.per_turn, metrics.per_turn_rate)
        ],
        "cumulative": [
            {
                "turn": c.turn,
                "dialogues": c.n_dialogues,
                "with_bias": c.n_biased_dialogues,
                "rate": e.value,
                "ci95": [e.low, e.high],
            }
            for c, e in zip(metrics.cumulative, metrics.cumulative_rate)
        ],
        **{key: METRIC[key].entry(METRIC[key].estimates(metrics)[0]) for key in ("re_emergence", "first_bias_turn")},
    }


def unparsed_reasons(store: StoreQueries, run_id: str) -> dict[str, int]:
    """How many of the run's labels are unparsed for each reason (nodes/verdicts.py), most frequent first."""
    counts = Counter(unread_reason(e) for e in store.unparsed_explanations(run_id))
    return dict(counts.most_common())


def _unfinished(dialogues: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """The dialogues that failed (each with its error) and the threads that are paused."""
    ended = ("finished", "paused")
    failed = [{"thread_id": d["thread_id"], "error": d["error"]} for d in dialogues if d["status"] not in ended]
    return failed, [d["thread_id"] for d in dialogues if d["status"] == "paused"]


def _resume(run_id: str, where: str, *, budget: dict[str, Any] | None, failed: bool, paused: bool) -> str | None:
    """The command that goes on with the run: past a cost cap with a higher one, failed dialogues again, paused ones."""
    run_id = shlex.quote(run_id)
    if budget and budget.get("held"):
        return f"python -m graph.run --run-id {run_id} --db {where} --max-cost {2 * budget['max_usd']:g}"
    if failed:
        return f"python -m graph.run --run-id {run_id} --db {where}"
    if paused:
        return f"python -m graph.resume --run-id {run_id} --db {where}"
    return None


def _judge_corrected(
    summary: dict[str, Any],
    store: StoreQueries,
    run_id: str,
    dialogues: Sequence[dict[str, Any]],
    matrix: dict[str, list],
    *,
    turns: int,
    default_target: str | None,
) -> None:
    """Add the rates corrected for the judge's error (``judge_corrected``), to the run and to each (target, mode)
    group."""
    chosen = choose_validation(store, run_id)
    cells = cells_of(dialogues, matrix, default_target=default_target, turns=turns)
    results = correct_run_cells(cells, chosen)
    summary["judge_corrected"] = pooled_block(cells, results, chosen)
    fix = beyond_fix(run_id, getattr(store, "path", None) and str(store.path))
    for g in summary["groups"]:
        key = (g["target"], g["mode"])
        g["judge_corrected"] = cell_block(results[key], chosen) if key in results else None
    for block in (summary["judge_corrected"], *(g["judge_corrected"] for g in summary["groups"])):
        if block and (block.get("beyond_validation") or {}).get("flagged"):
            block["fix"] = fix


def run_leakage(store: StoreQueries, run_id: str) -> dict[str, Any]:
    """Seed leakage over the run's scored user turns, with the threads and turns still flagged."""
    rows = store.user_turns(run_id)
    counts: dict[str, Any] = count_leakage(rows).as_dict()
    counts["flagged"] = [f"{r['thread_id']} turn {r['idx']}" for r in rows if r["leaked"]]
    return counts


def _groups(
    dialogues: Sequence[dict[str, Any]],
    matrix: dict[str, list],
    turns: int,
    *,
    default_target: str | None,
    seed_of: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Bias by (target, mode): a grid run compares targets and modes, not their pool."""
    by_group: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for d in dialogues:
        by_group.setdefault((d.get("target") or default_target or "", d["mode"]), []).append(d)
    groups = []
    for (target, mode), members in sorted(by_group.items()):
        kept = [d["thread_id"] for d in members if d["thread_id"] in matrix]
        clusters = [seed_of[t] for t in kept] if seed_of else None
        m = summarise(
            [matrix[t] for t in kept],
            turns,
            n_boot=1000,
            seed=0,
            delta_start=min(5, turns),
            delta_end=turns,
            clusters=clusters,
        )
        last = m.cumulative_rate[-1] if m.cumulative_rate else None
        groups.append(
            {
                "target": target,
                "mode": mode,
                "dialogues": len(members),
                "finished": sum(1 for d in members if d["status"] == "finished"),
                # per_turn, cumulative, re_emergence, first_bias_turn (each with its interval), transitions
                **_rates(m, [matrix[t] for t in kept], turns, clusters),
                "per_turn_rate": [e.value for e in m.per_turn_rate],
                "cumulative_final": {"rate": last.value, "ci95": [last.low, last.high]} if last else None,
            }
        )
    return groups


SHORT_SPEC = 14  # a target spec longer than this is shown as T1, T2 ... in the by-group table, with a legend


def target_keys(specs) -> dict[str, str]:
    """Spec → T1, T2 ... when some target spec is too long for an 80-column table; {} when every spec fits whole."""
    unique = list(dict.fromkeys(specs))
    if all(len(spec) <= SHORT_SPEC for spec in unique):
        return {}
    return {spec: f"T{i}" for i, spec in enumerate(unique, start=1)}
