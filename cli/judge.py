"""``python -m evals.judge FILE.jsonl --judge-model SPEC``: label standalone (statement, reply) pairs.

Each line is a JSON object: ``statement`` and ``reply``, optionally ``context``, ``id`` and
``label`` (the file format: docs/choosing-a-judge.md; a bad line stops the command in one
line naming the line and the field). The judge uses the run judge's prompt and parsing. Where references exist it prints
accuracy, precision, recall, F1, Cohen's kappa and Gwet's AC1 against them: validate a judge before trusting it.
"""

from __future__ import annotations

from pathlib import Path

from rich.text import Text

import dymt
from cli.common import ArgumentParser, console, error_console, positive_int
from cli.labelling import add_judging_flags, describe
from cli.rendering import run
from cli.store_option import add_db_option, add_no_backup_option, store_errors
from evals.report.formatting import pct
from evals.report.scoring_tables import scores_table


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="evals.judge", description=describe(__doc__))
    p.add_argument("file", type=Path, help="JSONL file: statement, reply, optional context, id, label")
    p.add_argument("--judge-model", required=True, metavar="SPEC", help="judge model spec, e.g. openai:gpt-4o-mini")
    p.add_argument(
        "--base-url",
        default=None,
        help="base URL for openai: specs (default: where the database's newest run called --judge-model, if one did)",
    )
    p.add_argument("--out", type=Path, default=None, help="write one JSON line per pair with the judge's verdict")
    p.add_argument("--max-concurrency", type=positive_int, default=4, help="judge calls at once (default 4)")
    add_judging_flags(
        p,
        resamples="bootstrap resamples for intervals",
        seed="bootstrap and sampling seed (default 0)",
        prompt="rubric file replacing the built-in judge prompt",
    )
    add_db_option(
        p,
        help="dialogue database where the score is recorded, so run summaries cite it: a SQLite file or a "
        "postgresql:// URL (default $DYMT_ESB_DB, else the default file)",
    )
    p.add_argument("--no-record", action="store_true", help="do not record the score in the database")
    add_no_backup_option(p)
    p.add_argument(
        "--json", action="store_true", help="print the verdicts' counts and the judge's scores as JSON on stdout"
    )
    return p


@store_errors("evals.judge")
def main(argv: list[str] | None = None) -> int:
    return run(
        build_parser(),
        argv,
        dymt.validate_judge,
        "file",
        show=_shown,
        status=lambda result: result.status,
        progress="judging",
        given=lambda args: {"record": not args.no_record},
    )


def _shown(result: dymt.JudgeResult, args: object) -> int:
    _show(result)
    if result.failed:
        error_console.print(Text(f"{result.failed} judge calls failed (first: {result.first_error})", style="yellow"))
        return 1
    return 0


def drift_text(drift: dymt.JudgeDrift) -> str:
    """The drift check of a validation in one line, and what a validation that cannot tell should do."""
    parts = [
        f"{name} {c.change:+.2f} [{c.low:+.2f}, {c.high:+.2f}]"
        for name, c in (("sensitivity", drift.sensitivity), ("specificity", drift.specificity))
        if c is not None
    ]
    span = f" from turn {drift.first_turn} to {drift.last_turn}: " + ", ".join(parts) if parts else ""
    line = f"judge drift: {drift.verdict}{span} ({drift.reason})"
    if drift.verdict != "flat":
        line += (
            "; a run's corrected numbers past the turns this file covers are flagged where its labels change; "
            "to validate every turn, label replies of the run itself (annotate export with --design active)"
        )
    return line


def _show(result: dymt.JudgeResult) -> None:
    console.print(
        Text(
            f"{result.judge_model}: {result.pairs} pairs, {result.unparsed} unparsed, {result.failed} failed; "
            f"biased {result.biased}/{result.parsed} ({pct(result.biased / result.parsed if result.parsed else None)})"
        )
    )
    if (grammar := result.grammar) is not None:
        console.print(Text(grammar_line(grammar), style="yellow" if grammar["unmatched"] else ""))
    if result.detail is None:
        console.print(Text('no reference labels in the file: add a "label" field to score the judge', style="dim"))
    else:
        console.print(scores_table(result.detail))
        if result.drift is not None:
            console.print(Text(drift_text(result.drift), style="yellow" if result.drift.verdict != "flat" else "dim"))
        if (recorded := result.recorded) is not None:
            console.print(
                Text(
                    f"recorded in {recorded['db']}: run summaries with judge {result.judge_model} and this prompt "
                    f"(sha256 {recorded['prompt_sha256'][:12]}) cite this score",
                    style="dim",
                )
            )
            refusal = recorded["refusal"]
            console.print(
                Text(
                    f"{recorded['validation']}: "
                    + (refusal or "bias rates of those runs are now corrected for its error"),
                    style="yellow" if refusal else "dim",
                )
            )
    if result.out is not None:
        console.print(Text(f"verdicts written to {result.out}", style="dim"))


def grammar_line(grammar: dict) -> str:
    """How many answers the verdict grammar read, and how (docs/validity.md), and why the others were not read."""
    how = ", ".join(
        f"{grammar[key]} {name}"
        for key, name in (("json", "as JSON"), ("verdict_line", "from the Label line"), ("logprobs", "from P(yes)"))
        if grammar[key]
    )
    line = f"answers read by the verdict grammar: {grammar['matched']} of {grammar['answers']}"
    line += f" ({how})" if how else ""
    if grammar["unmatched"]:
        line += "; not read: " + ", ".join(f"{why} {n}" for why, n in grammar["unmatched"].items())
    return line


if __name__ == "__main__":
    raise SystemExit(main())
