"""The end-of-run summary: per-turn and cumulative bias, unparsed labels, failures; as a dict or a table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from checkpoints.store import Store
from evals.metrics import summarise

BASE_MODEL_NOTE = (
    "The embedded model (local:gemma3-270m) is a 270M-parameter base model: it makes the pipeline run "
    "offline, and its numbers are no basis for conclusions about any other model."
)


def run_summary(store: Store, run_id: str, *, outcomes: Sequence[Any] = ()) -> dict[str, Any]:
    """Metrics of one run from the store, plus what happened to each dialogue in this invocation."""
    run = store.get_run(run_id) or {"config": {}}
    spec = run["config"].get("spec", {})
    turns = int(spec.get("turns") or 1)
    matrix_by_thread = store.label_matrix(run_id)
    metrics = summarise(list(matrix_by_thread.values()), turns, n_boot=1000, seed=0, delta_start=min(5, turns), delta_end=turns)
    dialogues = store.dialogues(run_id)
    failed = [{"thread_id": d["thread_id"], "error": d["error"]} for d in dialogues if d["status"] != "finished"]
    models = spec.get("models", {})
    summary: dict[str, Any] = {
        "run_id": run_id,
        "db": str(store.path),
        "mode": spec.get("mode"),
        "turns": turns,
        "models": models,
        "model_ids": spec.get("model_ids", {}),
        "dialogues": len(dialogues),
        "finished": sum(1 for d in dialogues if d["status"] == "finished"),
        "failed": failed,
        "skipped_this_time": sum(1 for o in outcomes if o.status == "skipped"),
        "unparsed_labels": metrics.n_unparsed,
        "per_turn": [
            {"turn": t.turn, "labelled": t.n_labelled, "biased": t.n_biased, "unparsed": t.n_unparsed,
             "rate": e.value, "ci95": [e.low, e.high]}
            for t, e in zip(metrics.per_turn, metrics.per_turn_rate)
        ],
        "cumulative": [
            {"turn": c.turn, "dialogues": c.n_dialogues, "with_bias": c.n_biased_dialogues,
             "rate": e.value, "ci95": [e.low, e.high]}
            for c, e in zip(metrics.cumulative, metrics.cumulative_rate)
        ],
        "re_emergence": {"rate": metrics.re_emergence.value, "ci95": [metrics.re_emergence.low, metrics.re_emergence.high]},
        "judge_content_free_p_yes": run["config"].get("judge_content_free_p_yes"),
        "unaligned_seeds": run["config"].get("unaligned_seeds", []),
        "notes": [BASE_MODEL_NOTE] if any(str(m).startswith("local:") for m in models.values()) else [],
    }
    if failed:
        summary["resume"] = f"python -m graph.run --run-id {run_id} --db {store.path} (with the same settings)"
    return summary


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.0f}%"


def _interval(ci: list[float | None]) -> str:
    low, high = ci
    return "" if low is None or high is None else f"[{100 * low:.0f}–{100 * high:.0f}]"


def render_summary(summary: dict[str, Any], console: Console) -> None:
    """The summary as rich tables; model output never reaches markup."""
    title = Text(f"Run {summary['run_id']} · {summary['mode']} · {summary['dialogues']} dialogues × {summary['turns']} turns")
    table = Table(title=title, show_lines=False)
    table.add_column("turn", justify="right")
    table.add_column("bias rate", justify="right")
    table.add_column("95% CI", justify="right")
    table.add_column("biased/labelled", justify="right")
    table.add_column("unparsed", justify="right")
    table.add_column("cumulative", justify="right")
    table.add_column("95% CI", justify="right")
    for turn, cum in zip(summary["per_turn"], summary["cumulative"]):
        table.add_row(
            str(turn["turn"]),
            _pct(turn["rate"]),
            _interval(turn["ci95"]),
            f"{turn['biased']}/{turn['labelled']}",
            str(turn["unparsed"]),
            _pct(cum["rate"]),
            _interval(cum["ci95"]),
        )
    console.print(table)
    models = ", ".join(f"{role}={spec}" for role, spec in summary["models"].items())
    console.print(Text(f"models: {models}"))
    re_em = summary["re_emergence"]
    console.print(Text(f"re-emergence (biased → clean → biased): {_pct(re_em['rate'])} {_interval(re_em['ci95'])}"))
    console.print(Text(f"finished {summary['finished']}/{summary['dialogues']} · unparsed labels {summary['unparsed_labels']} · failed {len(summary['failed'])}"))
    for item in summary["failed"]:
        console.print(Text(f"  failed {item['thread_id']}: {item['error'] or 'not finished'}", style="red"))
    if summary.get("unaligned_seeds"):
        console.print(Text(f"seeds with no item in this track (not run): {', '.join(summary['unaligned_seeds'])}", style="yellow"))
    if "resume" in summary:
        console.print(Text(f"resume: {summary['resume']}", style="yellow"))
    console.print(Text(f"stored in {summary['db']} (dialogues may contain harmful text; they stay in this local file)", style="dim"))
    for note in summary["notes"]:
        console.print(Text(note, style="bold yellow"))
