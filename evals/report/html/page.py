"""report.html: one self-contained page with the results (cards, report.md's sections, charts) and the dialogues.

The page needs no server and loads nothing: its style and script are package files inlined
here, and a Content-Security-Policy allows only those two (by hash) and no network at all.
The file is windows-1252: everything but the compressed dialogues is ASCII (other characters as
character references or ``\\u`` escapes), so the dialogues can sit in it one byte per character.
Numbers come from the very blocks report.md is written from (:func:`evals.report.markdown.report_blocks`).
Model text never enters the HTML: it travels as data and the page's script shows it with
``textContent`` only.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shlex
from collections.abc import Mapping, Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from checkpoints.vocabulary import PRIMARY_LABELS
from evals.judge_error.labelling_rounds import LabellingRounds
from evals.report.data import ReportData
from evals.report.exports import PLOTS
from evals.report.html.cards import cards_html
from evals.report.html.charts import DYNAMICS_FIGURE, category_figure, curve_figure, dynamics_figure
from evals.report.html.dialogues import PageDialogue, pack
from evals.report.html.sections import e, sections_html
from evals.report.markdown import CONTENT_WARNING, report_blocks
from evals.report.transition_tables import TRANSITIONS_NOTE


@cache
def asset(name: str) -> str:
    """The page's own CSS or JavaScript, shipped as package data, in ASCII (``\\uXXXX`` for anything else)."""
    text = resources.files("evals.report.html").joinpath("assets", name).read_text(encoding="utf-8")
    return "".join(c if ord(c) < 128 else "".join(f"\\u{u:04x}" for u in _utf16(c)) for c in text)


def _utf16(c: str) -> list[int]:
    data = c.encode("utf-16-be")
    return [int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2)]


def csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


def judge_corrected(report: ReportData) -> Mapping[Any, Any] | None:
    """Judge-error-corrected curves per (target, mode), when the report data carries them (else None)."""
    value = getattr(report, "judge_corrected", None)
    return value if isinstance(value, Mapping) and value else None


def _json_block(value: Any) -> str:
    """JSON safe inside a <script> data block: no "</script" or "<!--" can close or confuse it."""
    return json.dumps(value, ensure_ascii=True, separators=(",", ":")).replace("<", "\\u003c")


def _select(key: str, title: str, options: Sequence[tuple[str, str]]) -> str:
    items = "".join(f'<option value="{e(v)}">{e(text)}</option>' for v, text in options)
    return f'<label>{e(title)} <select id="f-{key}"><option value="">all</option>{items}</select></label>'


def _filters(pages: Sequence[PageDialogue]) -> str:
    def values(get) -> list[tuple[str, str]]:
        return [(v, v) for v in sorted({get(p) for p in pages})]

    return "".join(
        [
            _select("category", "category", values(lambda p: p.record.category or "?")),
            _select("mode", "mode", values(lambda p: p.record.mode or "?")),
            _select("target", "target", values(lambda p: p.target)),
            _select(
                "label",
                "label",
                [
                    ("biased", "some reply biased ✗"),
                    ("no_bias", "no reply biased"),
                    ("unparsed", "some label unparsed ?"),
                ],
            ),
            _select(
                "leakage",
                "seed leakage",
                [("leaked", "seed leaked"), ("clean", "audited, no leak"), ("none", "not audited")],
            ),
            _select("review", "review", [("marked", "reviewed by me"), ("unmarked", "not reviewed")]),
            '<button id="reset" type="button">clear filters</button><span id="shown" role="status"></span>',
        ]
    )


def _review_bar() -> str:
    return (
        '<section class="review-bar" id="review" aria-label="review">'
        "<h2>Your review</h2><p>Mark replies below (agree or disagree with the judge, or your own label, with a note). "
        "Marks stay in this browser; download them as a CSV that <code>python -m evals.annotate agree FILE --run-id "
        "RUN</code> "
        "reads to compare you with the judge.</p>"
        '<div class="review-actions"><label>reviewer <input id="reviewer" type="text" size="14" value="reviewer" '
        'autocomplete="off"></label> <span id="review-count" role="status">0 replies marked</span> '
        '<button type="button" id="review-download">download review CSV</button> '
        '<button type="button" id="review-clear">clear my marks</button></div></section>'
    )


def _labelling_section(
    rounds: Sequence[LabellingRounds], *, label_set: str, db: Path | str, out: Path | str | None
) -> str:
    """Label the next batch: what the latest batch narrowed, what the next is expected to buy, and the queue's
    controls."""
    batch = [r for r in rounds if r.next_batch]
    if not batch:
        return ""
    n = sum(len(r.next_batch.items) for r in batch if r.next_batch)
    sets = f" --label-set {shlex.quote(label_set)}" if label_set != PRIMARY_LABELS else ""
    at = f" --db {shlex.quote(str(db))}"
    lines = "".join(f"<li>{e(line.strip())}</li>" for r in rounds for line in r.lines())
    validate = "".join(
        f"<li><code>python -m evals.annotate validate labels-NAME.csv --run-id {e(shlex.quote(r.run_id))}{e(sets)}"
        f"{e(at)}</code></li>"
        for r in batch
    )
    runs = " ".join(f"--run-id {shlex.quote(r.run_id)}" for r in rounds)
    again = (
        f"<code>python -m evals.report {e(runs)} --out {e(shlex.quote(str(out)))} --html{e(sets)}{e(at)}</code>"
        if out is not None
        else "the same <code>python -m evals.report ... --html</code> command"
    )
    return (
        '<section class="review-bar labelling" id="labelling" aria-label="labelling">'
        f'<h2>Label the next batch</h2><ul class="rounds">{lines}</ul>'
        f"<p>The next {n} replies chosen for labelling are served below one at a time, in order, without the judge's "
        "label. "
        "Label each biased or not biased (as in <code>docs/annotators.md</code>), download the batch, store it with</p>"
        f"<ul>{validate}</ul><p>(NAME from the labeller field), then build this page again for the batch after it: "
        f"{again}.</p>"
        '<div class="review-actions"><label>labeller <input id="labeller" type="text" size="14" value="labeller" '
        'autocomplete="off"></label> <button type="button" id="queue-start">label the next batch</button> '
        f'<span id="queue-count" role="status">0 of {n} labelled</span> '
        '<button type="button" id="queue-download">download labelled batch CSV</button></div>'
        '<div id="queue" class="queue" tabindex="-1" hidden></div></section>'
    )


def _page_meta(
    run_ids: Sequence[str], *, label_set: str, generated_at: str, labelling: Sequence[LabellingRounds]
) -> dict:
    """What the page's script reads: its runs and label set, where review marks are kept, the labelling queue."""
    return {
        "runs": list(run_ids),
        "label_set": label_set,
        "generated_at": generated_at,
        "store_key": "dymt-esb-review:" + label_set + ":" + ",".join(run_ids),
        "queue": [
            {"item": item, "draw": draw, "run": r.run_id}
            for r in labelling
            if r.next_batch
            for item, draw in r.next_batch.items
        ],
    }


def render_page(
    report: ReportData,
    pages: Sequence[PageDialogue],
    *,
    run_ids: Sequence[str],
    label_set: str,
    generated_at: str,
    db: Path | str,
    labelling: Sequence[LabellingRounds] = (),
    out: Path | str | None = None,
) -> bytes:
    """The whole page: the file's bytes (windows-1252).

    ``labelling`` (each run's :func:`evals.judge_error.labelling_rounds.labelling_rounds`) adds the labelling queue: the
    next batch's replies served in order, and what the latest batch narrowed; ``out`` is the report's folder,
    for the command that builds the page again.
    """
    corrected = judge_corrected(report)
    figures = {
        PLOTS["cumulative"]: lambda: curve_figure(
            report.series, cumulative=True, corrected=corrected, figure_id="fig-cumulative"
        ),
        PLOTS["per_turn"]: lambda: curve_figure(
            report.series, cumulative=False, corrected=corrected, figure_id="fig-per-turn"
        ),
        PLOTS["categories"]: lambda: category_figure(report.categories, figure_id="fig-categories"),
        DYNAMICS_FIGURE: lambda: dynamics_figure(report.transitions, corrected),
    }

    def image(alt: str, file: str) -> str:
        return figures[file]() if file in figures else f"<p>{e(alt)}: {e(file)}</p>"

    blocks = [b for b in report_blocks(report, db=db, generated_at=generated_at) if b != f"> {CONTENT_WARNING}"]
    if TRANSITIONS_NOTE in blocks:  # the page draws the dynamics beside their tables
        at = blocks.index(TRANSITIONS_NOTE) + 1
        blocks[at:at] = [f"![Bias dynamics by turn]({DYNAMICS_FIGURE})"]
    body, toc = sections_html(blocks, image=image)
    index, blob = pack(pages)
    meta = _page_meta(run_ids, label_set=label_set, generated_at=generated_at, labelling=labelling)
    style, script = asset("page.css"), asset("page.js")
    csp = (
        f"default-src 'none'; style-src {csp_hash(style)}; script-src {csp_hash(script)}; "
        "img-src data:; base-uri 'none'; form-action 'none'"
    )
    title = f"DyMT-ESB · {', '.join(run_ids)}"
    labelling_link = '<a href="#labelling">Labelling</a>' if any(r.next_batch for r in labelling) else ""
    n_branches = len(index["rows"]) - len(index["roots"])
    nav = "".join(f'<a href="#{e(anchor)}">{e(text)}</a>' for anchor, text in toc)
    head = (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="windows-1252">'
        f'<meta http-equiv="Content-Security-Policy" content="{e(csp)}">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{e(title)}</title>'
        f"<style>{style}</style></head><body>"
        f"<header><h1>{e(title)}</h1><p>Bias-dynamics report · {len(pages)} dialogues, {n_branches} branches · "
        f"label set {e(label_set)} · {e(db)} · generated {e(generated_at)}</p></header>"
        f'<div class="warning" role="note">{e(CONTENT_WARNING)} This page holds them too: keep it local.</div>'
        f'<nav class="toc" aria-label="contents">{nav}<a href="#dialogues">Dialogues</a><a href="#review">Review</a>'
        f"{labelling_link}</nav>"
        f'<main><section id="summary" aria-label="results">{cards_html(report)}{body}</section>'
        f'{_review_bar()}{_labelling_section(labelling, label_set=label_set, db=db, out=out)}<section id="dialogues" '
        'aria-label="dialogues"><h2>Dialogues</h2>'
        '<p class="legend-marks">Labels by turn: <span class="m-b">✗</span> biased · <span class="m-n">✓</span> not '
        "biased · "
        '<span class="m-u">?</span> unparsed (never guessed) · <span class="m-x">·</span> no label. '
        "Open a dialogue for its turns, rationales and branch tree; open a branch beside its parent.</p>"
        f'<nav class="filters" aria-label="filters">{_filters(pages)}</nav><ol id="list" class="list"></ol>'
        '<button type="button" id="more" hidden>show more</button></section></main>'
        f'<script type="application/json" id="dymt-meta">{_json_block(meta)}</script>'
        f'<script type="application/json" id="dymt-index">{_json_block(index)}</script>'
        '<script type="application/octet-stream" id="dymt-bodies">'
    )
    tail = f"</script><script>{script}</script></body></html>\n"
    return head.encode("ascii", "xmlcharrefreplace") + blob + tail.encode("ascii")
