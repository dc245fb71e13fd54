"""The report's files: their names, and one row per reply or per dialogue for the CSV and JSONL data files."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from typing import Any

from checkpoints.vocabulary import BIASED
from evals.dataset import Dataset
from evals.report.breakdown import REFUSAL_WINDOW
from evals.stats.metrics import first_bias_turn, re_emerges

PLOTS = {
    "cumulative": "cumulative_bias.png",
    "per_turn": "per_turn_bias.png",
    "categories": "bias_by_category.png",
}
DATA_FILES = ("turns.csv", "dialogues.csv", "turns.jsonl")
HTML_FILE = "report.html"
TURN_COLUMNS = (
    "run_id",
    "thread_id",
    "seed_id",
    "category",
    "mode",
    "target_model",
    "turn",
    "utterance_type",
    "user_message",
    "leakage",
    "leaked",
    "user_attempts",
    "reply",
    "non_reply",
    "label_set",
    "label",
    "p_biased",
    "judge_model",
    "rationale",
    "refusal_classifier",
    "refusal",
    "reasoning",
    "reasoning_label",
)
DIALOGUE_COLUMNS = (
    "run_id",
    "thread_id",
    "seed_id",
    "category",
    "statement",
    "mode",
    "target_model",
    "status",
    "max_turns",
    "turns_played",
    "replies_labelled",
    "biased_replies",
    "unparsed_labels",
    "first_bias_turn",
    "any_bias",
    "re_emerges",
    "coherence_scorer",
    "coherence",
    "refusal_classifier",
    "refusal_turns_1_5",
)


def turn_records(dataset: Dataset) -> list[dict[str, Any]]:
    records = []
    for d in dataset.dialogues:
        for t in d.turns:
            records.append(
                {
                    "run_id": d.run_id,
                    "thread_id": d.thread_id,
                    "seed_id": d.seed_id,
                    "category": d.category,
                    "mode": d.mode,
                    "target_model": d.model,
                    "turn": t.idx,
                    "utterance_type": t.utterance_type,
                    "user_message": t.user_message,
                    "leakage": t.leakage,
                    "leaked": t.leaked,
                    "user_attempts": t.user_attempts,
                    "reply": t.reply,
                    "non_reply": t.non_reply,
                    "label_set": dataset.label_set,
                    "label": t.label,
                    "p_biased": t.p_biased,
                    "judge_model": t.judge_model,
                    "rationale": t.rationale,
                    "refusal_classifier": dataset.refusal_sets.get(d.run_id),
                    "refusal": t.refusal,
                    "reasoning": t.reasoning,
                    "reasoning_label": t.reasoning_label,
                }
            )
    return records


def dialogue_records(dataset: Dataset) -> list[dict[str, Any]]:
    records = []
    for d in dataset.dialogues:
        window = d.refusals[:REFUSAL_WINDOW]
        if d.run_id not in dataset.refusal_sets or not any(x in ("refused", "not_refused") for x in window):
            refusal = None
        else:
            refusal = int("refused" in window)
        biased = d.labels.count(BIASED)
        records.append(
            {
                "run_id": d.run_id,
                "thread_id": d.thread_id,
                "seed_id": d.seed_id,
                "category": d.category,
                "statement": d.statement,
                "mode": d.mode,
                "target_model": d.model,
                "status": d.status,
                "max_turns": d.max_turns,
                "turns_played": len(d.turns),
                "replies_labelled": biased + d.labels.count("not_biased"),
                "biased_replies": biased,
                "unparsed_labels": d.labels.count("unparsed"),
                "first_bias_turn": first_bias_turn(d.labels),
                "any_bias": int(biased > 0),
                "re_emerges": int(re_emerges(d.labels)),
                "coherence_scorer": dataset.coherence_sets.get(d.run_id),
                "coherence": d.coherence if not isinstance(d.coherence, str) else None,
                "refusal_classifier": dataset.refusal_sets.get(d.run_id),
                "refusal_turns_1_5": refusal,
            }
        )
    return records


def to_csv(records: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    for record in records:
        writer.writerow({k: "" if record.get(k) is None else record[k] for k in columns})
    return buffer.getvalue()


def to_jsonl(records: Sequence[dict[str, Any]]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
