"""A run's dialogues as chat-format records: OpenAI-style ``messages`` plus per-turn labels and metadata.

One record per dialogue, the shape fine-tuning and evaluation tools read
(``{"messages": [{"role": "system" | "user" | "assistant", "content": ...}]}``),
with what this project adds beside it: each turn's label, rationale and leakage, a
thinking target's reasoning (never in ``messages``: they hold what the user read),
and where the dialogue came from. The seed statement is the one thing the target
never saw, so it is masked unless asked for. Everything is read through the
read-only :class:`~checkpoints.readers.Reader`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import prompts
from checkpoints.branching import describe_change
from checkpoints.readers import Reader
from checkpoints.records import DialogueRecord
from checkpoints.vocabulary import PRIMARY_LABELS

SEED_MASK = "[seed masked: pass --show-seed]"


def target_prompt_template(target_spec: str | None) -> str:
    """The prompt file the target node used: the embedded base model gets the transcript style."""
    # Mirrors nodes.models: only the local provider is a base model prompted as a transcript.
    return "target.transcript" if (target_spec or "").startswith("local:") else "target"


def leakage_by_turn(reader: Reader, thread_id: str) -> dict[int, dict[str, Any]]:
    """Turn → seed-leakage fields, from whatever the store holds: ``turns`` columns or a table named ``*leak*``.

    Empty when this database has no leakage audit; the column names are read, not assumed.
    """
    out: dict[int, dict[str, Any]] = {}
    leak_columns = [c for c in reader.columns("turns") if "leak" in c.lower()]
    if leak_columns:
        selected = ", ".join(f'"{c}"' for c in leak_columns)
        for row in reader.db.query(f"select idx, {selected} from turns where thread_id = ?", [thread_id]):
            values = {c: row[c] for c in leak_columns if row[c] is not None}
            if values:
                out.setdefault(int(row["idx"]), {}).update(values)
    for table in sorted(t for t in reader.file_tables if "leak" in t.lower()):
        cols = reader.columns(table)
        if not {"thread_id", "idx"} <= set(cols):
            continue
        fields = [c for c in cols if c not in ("thread_id", "idx")]
        for row in reader.db.query(f'select * from "{table}" where thread_id = ? order by idx', [thread_id]):
            values = {c: row[c] for c in fields if row[c] is not None}
            if values:
                out.setdefault(int(row["idx"]), {}).update(values)
    return out


LEAK_THRESHOLD = 0.5  # a leakage score at or above this counts as leaked when no flag column says otherwise


def leaked(fields: dict[str, Any] | None) -> bool | None:
    """Whether a turn's leakage fields mark it leaked (a flag column, else a score >= 0.5); None with no audit."""
    if not fields:
        return None
    flags = {k: v for k, v in fields.items() if any(w in k.lower() for w in ("flag", "leaked"))}
    if flags:
        return any(str(v).strip().lower() in ("1", "true", "yes", "leaked", "flagged") for v in flags.values())
    scores = [v for v in fields.values() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return any(v >= LEAK_THRESHOLD for v in scores) if scores else None


def chat_record(reader: Reader, record: DialogueRecord, *, include_seed: bool = False) -> dict[str, Any]:
    """One dialogue as a chat-format record."""
    models = record.models
    # A branch to another target mixes two: the prompt is the one its latest turns were played with.
    target_spec = next((t.target_model for t in reversed(record.turns) if t.target_model), None) or models.get("target")
    template = prompts.load(target_prompt_template(target_spec))
    system = "\n\n".join(str(m.content) for m in template.render() if m.type == "system")
    run = reader.get_run(record.run_id) or {}
    stored_hash = (run.get("prompt_hashes") or {}).get(template.name)
    leakage = leakage_by_turn(reader, record.thread_id)
    hide = _masker(None if include_seed else record.statement)
    messages: list[dict[str, str]] = [{"role": "system", "content": system}]
    turns = []
    for t in record.turns:
        if t.user_message is not None:
            messages.append({"role": "user", "content": t.user_message})
        if t.reply is not None:
            messages.append({"role": "assistant", "content": t.reply})
        turns.append(
            {
                "turn": t.idx,
                "label": t.label,
                # The judge saw the seed and may quote it; the messages are left as the target saw them.
                "rationale": hide(t.rationale),
                "p_biased": t.p_biased,
                "judge_raw": hide(t.judge_raw),
                "judge_model": t.judge_model,
                "utterance_type": t.utterance_type,
                "leakage": leakage.get(t.idx),
                "leaked": leaked(leakage.get(t.idx)),
                "inherited_from": t.inherited_from,
                # The target's reasoning, split off its reply: beside the messages, which hold what the user read.
                "reasoning": t.reasoning,
                "reasoning_carrier": t.reasoning_carrier,
                "reasoning_label": t.reasoning_label,
            }
        )
    return {
        "id": record.thread_id,
        "messages": messages,
        "turns": turns,
        "metadata": {
            "run_id": record.run_id,
            "thread_id": record.thread_id,
            "seed_id": record.seed_id,
            "category": record.category,
            "mode": record.mode,
            "target_model": models.get("target") or target_spec,
            "user_model": models.get("user"),
            "judge_model": models.get("judge"),
            "status": record.status,
            "stop_reason": record.stop_reason,
            "max_turns": record.max_turns,
            "label_set": record.label_set,
            "parent_thread_id": record.parent_thread_id,
            "fork_turn": record.fork_turn,
            "change": describe_change(record.change, reveal_seed=include_seed) or None,
            "seed_statement": record.statement if include_seed else SEED_MASK,
            "seed_masked": not include_seed,
            "system_prompt": template.name,
            "system_prompt_sha256": template.sha256,
            # False when the prompt file changed since the run: the text above is today's, not the run's.
            "system_prompt_matches_run": None if stored_hash is None else stored_hash == template.sha256,
        },
    }


def _masker(statement: str | None):
    """A function replacing the seed statement (any case) with the mask; identity when the seed is shown."""
    if not statement or not statement.strip():
        return lambda text: text
    pattern = re.compile(re.escape(statement.strip()), re.IGNORECASE)
    return lambda text: pattern.sub(SEED_MASK, text) if isinstance(text, str) else text


def iter_chat_records(
    reader: Reader, run_id: str, *, label_set: str = PRIMARY_LABELS, include_seed: bool = False
) -> Iterator[dict[str, Any]]:
    """Every dialogue of a run (branches after their parent) as chat-format records."""
    for summary in reader.summaries(run_id=run_id, label_set=label_set):
        record = reader.dialogue(summary.thread_id, label_set=label_set)
        if record is not None:
            yield chat_record(reader, record, include_seed=include_seed)


def to_jsonl(records: list[dict[str, Any]]) -> str:
    """One JSON object per line (UTF-8 kept as is)."""
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
