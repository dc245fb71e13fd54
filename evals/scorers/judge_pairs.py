"""Validating a judge on standalone (statement, reply) pairs: the JSONL file, its checks, and judging each pair."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from checkpoints.store import Writer
from checkpoints.vocabulary import BIASED, NOT_BIASED
from evals.judge_error.validation import JudgeValidation
from evals.scorers.judge_validation import record_validation
from evals.scorers.loop import Tally, run_scorer
from evals.scorers.posthoc import prompt_hash
from evals.stats.agreement import Classification, classification
from models.registry import RoleModel
from nodes.dialogue import NO_HISTORY, token_usage
from nodes.judge import TRANSCRIPT_CONTEXT_CHARS, BiasItem, create_bias_scorer, judge_context, label_fields
from nodes.scorer import Scored
from nodes.state import ChatTurn
from prompts import PromptTemplate

_GOLD = {
    "biased": BIASED,
    "bias": BIASED,
    "not biased": NOT_BIASED,
    "not_biased": NOT_BIASED,
    "not-biased": NOT_BIASED,
    "unbiased": NOT_BIASED,
    # As the error below lists them: a CSV or a JSON string holds "true" / "1" as text.
    "true": BIASED,
    "1": BIASED,
    "false": NOT_BIASED,
    "0": NOT_BIASED,
}


class PairFileError(ValueError):
    """A line of the pairs file that cannot be used, with its line number."""


@dataclass(frozen=True)
class Pair:
    id: str
    statement: str
    reply: str
    context: str | list[dict[str, str]] | None
    gold: str | None
    turn: int = 1  # the reply's turn in its conversation (``turn``, else from its context: pair_turn)
    category: str | None = None


def pair_turn(context: str | list[dict[str, str]] | None) -> int:
    """A reply's turn read from the conversation before it: one more than the assistant messages in it (a text
    context counts its lines that begin ``Assistant:``); a reply without a context is at turn 1."""
    if context is None:
        return 1
    if isinstance(context, str):
        return 1 + sum(1 for line in context.splitlines() if line.lstrip().startswith("Assistant:"))
    return 1 + sum(1 for m in context if m.get("role") == "assistant")


def normalise_gold(value: Any) -> str:
    """A reference label as "biased" / "not_biased"; other values raise ValueError."""
    if isinstance(value, bool):
        return BIASED if value else NOT_BIASED
    if isinstance(value, int) and value in (0, 1):
        return BIASED if value else NOT_BIASED
    if isinstance(value, str) and value.strip().lower() in _GOLD:
        return _GOLD[value.strip().lower()]
    raise ValueError(f"label {value!r} is not one of biased, not biased, true, false, 1, 0")


def read_pairs(path: Path) -> list[Pair]:
    """Parse the pairs file; any bad line raises PairFileError naming the line and the fix."""
    try:
        data = path.read_bytes()
        lines = data.decode("utf-8").splitlines()
    except FileNotFoundError:
        raise PairFileError(f"no file {path}: pass a JSONL file with statement and reply on every line") from None
    except UnicodeDecodeError as exc:
        at = data.count(b"\n", 0, exc.start) + 1
        raise PairFileError(
            f"{path}:{at}: byte 0x{data[exc.start]:02x} is not UTF-8: pass a UTF-8 JSONL file"
        ) from None
    pairs: list[Pair] = []
    seen: set[str] = set()
    for number_, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{number_}"
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PairFileError(f"{where} is not JSON ({exc.msg})") from None
        if not isinstance(item, dict):
            raise PairFileError(f"{where}: each line must be a JSON object")
        for key in ("statement", "reply"):
            if not isinstance(item.get(key), str) or not item[key].strip():
                raise PairFileError(f"{where}: needs a non-empty string {key!r}")
        context = item.get("context")
        if context is not None and not _valid_context(context):
            raise PairFileError(
                f'{where}: context must be text or a list of {{"role": "user"|"assistant", "content": ...}}'
            )
        gold = None
        if item.get("label") is not None:
            try:
                gold = normalise_gold(item["label"])
            except ValueError as exc:
                raise PairFileError(f"{where}: {exc}") from None
        pair_id = str(item.get("id", number_))
        if pair_id in seen:
            raise PairFileError(f"{where}: id {pair_id!r} appears twice")
        seen.add(pair_id)
        turn = item.get("turn")
        if turn is not None and (isinstance(turn, bool) or not isinstance(turn, int) or turn < 1):
            raise PairFileError(f"{where}: turn must be a whole number >= 1 (the reply's turn), got {turn!r}")
        category = item.get("category")
        if category is not None and (not isinstance(category, str) or not category.strip()):
            raise PairFileError(f"{where}: category must be a non-empty string, got {category!r}")
        pairs.append(
            Pair(
                pair_id,
                item["statement"],
                item["reply"],
                context,
                gold,
                turn=pair_turn(context) if turn is None else turn,
                category=category.strip() if category else None,
            )
        )
    if not pairs:
        raise PairFileError(f"{path} has no pairs")
    return pairs


def _valid_context(context: Any) -> bool:
    if isinstance(context, str):
        return True
    return isinstance(context, list) and all(
        isinstance(m, dict) and m.get("role") in ("user", "assistant") and isinstance(m.get("content"), str)
        for m in context
    )


def pair_context(model: RoleModel, pair: Pair) -> str | Sequence[ChatTurn]:
    """The earlier dialogue of a pair as the live judge reads it: its messages, or its text (trimmed the same way)."""
    if not isinstance(pair.context, str):
        return judge_context(model.style, pair.context or [])  # type: ignore[arg-type]
    context = pair.context.strip() or NO_HISTORY
    if model.style == "transcript" and len(context) > TRANSCRIPT_CONTEXT_CHARS:
        context = "…" + context[-TRANSCRIPT_CONTEXT_CHARS:]
    return context


async def judge_pairs(
    pairs: Sequence[Pair], model: RoleModel, *, concurrency: int = 1, on_step=lambda: None
) -> tuple[list[dict[str, Any] | None], Tally]:
    """One verdict per pair (None where the call failed), in input order."""
    verdicts: dict[str, dict[str, Any]] = {}

    def item(pair: Pair) -> BiasItem:
        return BiasItem(pair.statement, pair_context(model, pair), pair.reply)

    def record(pair: Pair, result: Scored) -> None:
        tokens = token_usage(result.output) if result.output is not None else {}
        verdicts[pair.id] = {
            **label_fields(result.verdict),
            "read_as": result.verdict.read_as,  # how the verdict grammar read it (None: it did not)
            "latency_judge": round(result.latency, 4),
            **({"judge_input_tokens": tokens["input_tokens"]} if "input_tokens" in tokens else {}),
        }

    tally = await run_scorer(
        create_bias_scorer(model=model), pairs, record, item=item, concurrency=concurrency, on_step=on_step
    )
    return [verdicts.get(p.id) for p in pairs], tally


def verdict_lines(pairs: Sequence[Pair], verdicts: Sequence[dict[str, Any] | None], judge_model: str) -> str:
    """The ``--out`` file: one JSON line per pair with its reference and the judge's verdict (or that the call
    failed)."""
    lines = [
        json.dumps(
            {
                "id": p.id,
                "statement": p.statement,
                "reply": p.reply,
                "reference": p.gold,
                "judge_model": judge_model,
                **(v or {"label": None, "error": "the judge call failed"}),
            },
            ensure_ascii=False,
        )
        for p, v in zip(pairs, verdicts)
    ]
    return "\n".join(lines) + "\n"


def against_references(
    pairs: Sequence[Pair], labels: Sequence[str | None], *, n_boot: int, seed: int
) -> Classification | None:
    """The judge's labels scored against the pairs' reference labels (biased = positive); None without references."""
    with_gold = [(p.gold, label) for p, label in zip(pairs, labels) if p.gold is not None]
    if not with_gold:
        return None
    gold, predicted = zip(*with_gold)
    return classification(list(gold), list(predicted), n_boot=n_boot, seed=seed)


def validation_items(pairs: Sequence[Pair], verdicts: Sequence[dict[str, Any] | None]) -> list[dict[str, Any]]:
    """One item per pair with a reference label: where it sat in its conversation, the judge's and the reference
    label (what a validation is stored as: evals/judge_error/drift.py reads the turns)."""
    return [
        {
            "id": p.id,
            "turn": p.turn,
            "context_turns": p.turn - 1,
            "context_tokens": (v or {}).get("judge_input_tokens"),
            "category": p.category,
            "target": None,
            "mode": None,
            "judge": (v or {}).get("label"),
            "reference": p.gold,
        }
        for p, v in zip(pairs, verdicts)
        if p.gold is not None
    ]


def items_validation(source: str, items: Sequence[dict[str, Any]]) -> JudgeValidation:
    """A validation from its stored items: its counts by turn and by category."""
    by_category: dict[str, list[tuple[Any, Any]]] = {}
    for item in items:
        if item.get("category"):
            by_category.setdefault(str(item["category"]), []).append((item.get("reference"), item.get("judge")))
    whole = JudgeValidation.from_pairs(
        source, [(i.get("reference"), i.get("judge"), float(i.get("turn") or 1)) for i in items]
    )
    categories: dict[str, Sequence[float]] = {
        name: (v.tp, v.fp, v.fn, v.tn)
        for name, rows in by_category.items()
        if (v := JudgeValidation.from_pairs(source, rows)).n
    }
    return JudgeValidation.from_turn_counts(source, {row[0]: row[1:] for row in whole.by_turn}, by_category=categories)


def record_pairs_validation(
    store: Writer,
    model: RoleModel,
    file: Path,
    result: Classification,
    *,
    template: PromptTemplate | None,
    items: list[dict[str, Any]] | None = None,
) -> str:
    """Record the judge's score on ``file`` (and its items) so run summaries with this judge and prompt cite it; the
    prompt's sha256.

    The prompt is ``template`` (a --judge-prompt file) when given, else the built-in judge prompt.
    """
    digest = template.sha256 if template is not None else prompt_hash("judge_bias", model.style)
    record_validation(
        store,
        judge_model=model.spec,
        prompt_hash=digest,
        file=str(file.resolve()),
        file_sha256=hashlib.sha256(file.read_bytes()).hexdigest(),
        result=result,
        items=items,
    )
    return digest
