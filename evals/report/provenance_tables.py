"""The report's provenance tables: the runs, their models, label sets and prompt hashes."""

from __future__ import annotations

from checkpoints.vocabulary import PRIMARY_LABELS
from evals.dataset import Dataset
from evals.report.breakdown import group
from evals.report.tables import TableData
from evals.scorers.label_sets import primary_prompt


def runs_table(dataset: Dataset) -> TableData:
    by_run = group(dataset.dialogues, lambda d: d.run_id)
    rows = []
    for run in dataset.runs:
        dialogues = by_run.get(run.run_id, [])
        finished = sum(d.status == "finished" for d in dialogues)
        rows.append(
            (
                run.run_id,
                ", ".join(run.modes) or "?",
                str(run.turns),
                f"{finished}/{len(dialogues)}",
                run.models.get("user", "?"),
                ", ".join(run.targets) or "?",
                run.models.get("judge", "?"),
                run.created_at or "",
                run.status or "",
            )
        )
    return TableData(
        "Runs",
        (
            "run",
            "modes",
            "turns",
            "finished/dialogues",
            "user model",
            "target models",
            "judge model",
            "created",
            "status",
        ),
        tuple(rows),
        left=9,
    )


def models_table(dataset: Dataset) -> TableData:
    rows = []
    for run in dataset.runs:
        for role, spec in run.models.items():
            sampling = run.sampling.get(role, {})
            settings = ", ".join(f"{k}={v}" for k, v in sorted(sampling.items()))
            rows.append((run.run_id, role, spec, run.model_ids.get(role, ""), settings))
    return TableData(
        "Models (requested spec and resolved model)",
        ("run", "role", "spec", "resolved", "sampling"),
        tuple(rows),
        left=5,
    )


def prompts_table(dataset: Dataset) -> TableData:
    names = sorted({name for run in dataset.runs for name in run.prompt_hashes})
    rows = tuple((name, *(run.prompt_hashes.get(name, "–")[:12] for run in dataset.runs)) for name in names)
    return TableData(
        "Prompts (sha256, first 12 hex digits)",
        ("prompt", *(run.run_id for run in dataset.runs)),
        rows,
        left=1 + len(dataset.runs),
    )


def label_sets_table(dataset: Dataset) -> TableData:
    rows = []
    for run in dataset.runs:
        judge = run.models.get("judge", "?")
        cf = run.judge_content_free_p_yes
        prompt, digest = primary_prompt(run.models.get("judge"), run.prompt_hashes)
        rows.append(
            (
                run.run_id,
                "bias",
                PRIMARY_LABELS,
                judge,
                prompt,
                (digest or "–")[:12],
                "" if cf is None else f"{cf:.3f}",
                "yes" if dataset.label_set == PRIMARY_LABELS else "",
            )
        )
        for info in dataset.label_sets:
            if info.run_id != run.run_id:
                continue
            used = (
                (info.kind == "bias" and info.name == dataset.label_set)
                or (info.kind == "refusal" and dataset.refusal_sets.get(run.run_id) == info.name)
                or (info.kind == "coherence" and dataset.coherence_sets.get(run.run_id) == info.name)
            )
            rows.append(
                (
                    run.run_id,
                    info.kind,
                    info.name,
                    info.model or "?",
                    info.prompt or "?",
                    (info.prompt_hash or "–")[:12],
                    "" if info.content_free_p_yes is None else f"{info.content_free_p_yes:.3f}",
                    "yes" if used else "",
                )
            )
    return TableData(
        "Label sets (bias labels, refusal verdicts, coherence and guard scores), each with the prompt that made it",
        ("run", "kind", "name", "model", "prompt", "sha256", "content-free P(yes)", "used here"),
        tuple(rows),
        left=8,
    )
