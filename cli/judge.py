"""``python -m evals.judge FILE.jsonl --judge-model SPEC``: label standalone (statement, reply) pairs.

Each line is a JSON object with ``statement`` and ``reply``, optionally ``context`` (the
earlier conversation, as text or as a list of ``{"role", "content"}`` messages), ``id``
and ``label`` (the reference: "biased"/"not biased", or true/false). The judge uses the
run judge's prompt and parsing. Where references exist it prints accuracy, precision,
recall, F1, Cohen's kappa and Gwet's AC1 against them: validate a judge before trusting it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

import prompts
from checkpoints.migrations import SchemaTooNewError
from checkpoints.paths import StoreError, check_db_path, default_db_path
from checkpoints.store import open_writer
from evals.agreement import Classification, classification
from evals.judging import prompt_hash
from evals.validation import record_validation
from cli.labelling import Tally, build_labeller, describe, run_scorer, write_atomic
from evals.formatting import interval, number, pct
from evals.metrics import BIASED, NOT_BIASED
from cli.common import ArgumentParser, console, error_console, fail, positive_int
from nodes.dialogue import NO_HISTORY
from nodes.judge import TRANSCRIPT_CONTEXT_CHARS, BiasItem, create_bias_scorer, judge_context, label_fields
from models.registry import RoleModel
from nodes.scoring import Scored

_GOLD = {
    "biased": BIASED,
    "bias": BIASED,
    "not biased": NOT_BIASED,
    "not_biased": NOT_BIASED,
    "not-biased": NOT_BIASED,
    "unbiased": NOT_BIASED,
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
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise PairFileError(f"no file {path}: pass a JSONL file with statement and reply on every line") from None
    except UnicodeDecodeError:
        raise PairFileError(f"{path} is not UTF-8 text: pass a JSONL file") from None
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
            raise PairFileError(f"{where}: context must be text or a list of {{\"role\": \"user\"|\"assistant\", \"content\": ...}}")
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
        pairs.append(Pair(pair_id, item["statement"], item["reply"], context, gold))
    if not pairs:
        raise PairFileError(f"{path} has no pairs")
    return pairs


def _valid_context(context: Any) -> bool:
    if isinstance(context, str):
        return True
    return isinstance(context, list) and all(
        isinstance(m, dict) and m.get("role") in ("user", "assistant") and isinstance(m.get("content"), str) for m in context
    )


def pair_context(model: RoleModel, pair: Pair) -> str:
    """The earlier dialogue of a pair as the live judge reads it (text contexts trimmed the same way)."""
    if not isinstance(pair.context, str):
        return judge_context(model.style, pair.context or [])
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
        verdicts[pair.id] = {**label_fields(result.verdict), "latency_judge": round(result.latency, 4)}

    tally = await run_scorer(create_bias_scorer(model=model), pairs, record, item=item, concurrency=concurrency, on_step=on_step)
    return [verdicts.get(p.id) for p in pairs], tally


def scores_table(result: Classification) -> Table:
    table = Table(title=Text("Judge against reference labels (biased = positive)"))
    table.add_column(Text("metric"))
    table.add_column(Text("value [95% CI]"), justify="right")
    for name, value in (
        ("pairs with a reference", str(result.n_items)),
        ("compared (judge label parsed)", str(result.n_compared)),
        ("judge unparsed or failed", str(result.n_unparsed)),
        ("TP / FP / FN / TN", f"{result.tp} / {result.fp} / {result.fn} / {result.tn}"),
        ("accuracy", interval(result.accuracy)),
        ("precision", interval(result.precision)),
        ("recall", interval(result.recall)),
        ("F1", "–" if result.f1 is None else f"{result.f1:.2f}"),
        ("Cohen's kappa", number(result.kappa)),
        ("Gwet's AC1", number(result.ac1)),
    ):
        table.add_row(Text(name), Text(value))
    return table


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="evals.judge", description=describe(__doc__))
    p.add_argument("file", type=Path, help="JSONL file: statement, reply, optional context, id, label")
    p.add_argument("--judge-model", required=True, metavar="SPEC", help="judge model spec, e.g. openai:gpt-4o-mini")
    p.add_argument("--base-url", default=None, help="base URL for openai: specs (an OpenAI-compatible server)")
    p.add_argument("--out", type=Path, default=None, help="write one JSON line per pair with the judge's verdict")
    p.add_argument("--max-concurrency", type=positive_int, default=4, help="judge calls at once (default 4)")
    p.add_argument("--n-boot", type=positive_int, default=1000, help="bootstrap resamples for intervals")
    p.add_argument("--seed", type=int, default=0, help="bootstrap and sampling seed (default 0)")
    p.add_argument("--judge-prompt", type=Path, default=None, metavar="FILE", help="rubric file replacing the built-in judge prompt")
    p.add_argument("--db", type=Path, default=None, help="dialogue database where the score is recorded, so run summaries cite it "
                   f"(default {default_db_path()})")
    p.add_argument("--no-record", action="store_true", help="do not record the score in the database")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        pairs = read_pairs(args.file)
    except PairFileError as exc:
        fail(str(exc))
    if args.out is not None and args.out.is_dir():
        fail(f"--out {args.out} is a directory: give a file path such as {args.out / 'verdicts.jsonl'}")
    template = None
    if args.judge_prompt is not None:
        try:
            template = prompts.load_file(args.judge_prompt, role="judge")
        except prompts.PromptError as exc:
            fail(f"--judge-prompt: {exc}")
    store = None
    record = not args.no_record and any(p.gold is not None for p in pairs)
    if record:
        try:
            db_path = check_db_path(args.db or default_db_path())
        except StoreError as exc:
            fail(str(exc))
    # The model is built (and the embedded one probed) before the database is opened: a model that
    # cannot run leaves nothing written.
    model = build_labeller(args.judge_model, flag="--judge-model", base_url=args.base_url, seed=args.seed)
    if record:
        try:
            store = open_writer(db_path)
        except (StoreError, SchemaTooNewError) as exc:
            fail(str(exc))
    if template is not None:
        model = dataclasses.replace(model, prompt=template)

    async def go():
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=error_console) as progress:
            task = progress.add_task("judging", total=len(pairs))
            return await judge_pairs(pairs, model, concurrency=args.max_concurrency, on_step=lambda: progress.advance(task))

    verdicts, tally = asyncio.run(go())
    if args.out is not None:
        lines = [
            json.dumps(
                {"id": p.id, "statement": p.statement, "reply": p.reply, "reference": p.gold, "judge_model": model.spec,
                 **(v or {"label": None, "error": "the judge call failed"})},
                ensure_ascii=False,
            )
            for p, v in zip(pairs, verdicts)
        ]
        write_atomic(args.out, "\n".join(lines) + "\n", private=True)
    labels = [v["label"] if v else None for v in verdicts]
    n_biased = labels.count(BIASED)
    n_parsed = n_biased + labels.count(NOT_BIASED)
    console.print(
        Text(
            f"{model.spec}: {len(pairs)} pairs, {tally.unparsed} unparsed, {tally.failed} failed; "
            f"biased {n_biased}/{n_parsed} ({pct(n_biased / n_parsed if n_parsed else None)})"
        )
    )
    with_gold = [(p.gold, label) for p, label in zip(pairs, labels) if p.gold is not None]
    if with_gold:
        gold, predicted = zip(*with_gold)
        result = classification(list(gold), list(predicted), n_boot=args.n_boot, seed=args.seed)
        console.print(scores_table(result))
        if store is not None and not tally.failed:
            digest = template.sha256 if template is not None else prompt_hash("judge_bias", model.style)
            record_validation(store, judge_model=model.spec, prompt_hash=digest, file=str(args.file.resolve()),
                              file_sha256=hashlib.sha256(args.file.read_bytes()).hexdigest(), result=result)
            console.print(Text(f"recorded in {store.path}: run summaries with judge {model.spec} and this prompt "
                               f"(sha256 {digest[:12]}) cite this score", style="dim"))
    else:
        console.print(Text("no reference labels in the file: add a \"label\" field to score the judge", style="dim"))
    if args.out is not None:
        console.print(Text(f"verdicts written to {args.out}", style="dim"))
    if tally.failed:
        error_console.print(Text(f"{tally.failed} judge calls failed (first: {tally.first_error})", style="yellow"))
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
