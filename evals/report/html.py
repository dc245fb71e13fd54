"""A run in the browser: one self-contained HTML page with every dialogue, its labels, rationales and branches.

The page needs no server and loads nothing: styles and the filter script are
inline, and a Content-Security-Policy allows only those two (by hash) and no
network at all. Every piece of model text goes through ``html.escape`` and is
shown as text, never as markup. Filters (category, mode, target, label, leakage)
hide dialogues on the page; they can also be set from the address, e.g.
``report.html#category=gender&label=biased``.
"""

from __future__ import annotations

import base64
import hashlib
import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from checkpoints.branching import describe_change
from checkpoints.chat_export import leaked, leakage_by_turn
from checkpoints.readers import Reader
from checkpoints.records import DialogueRecord
from checkpoints.vocabulary import BIASED, LABEL_TEXT, LABELS, PRIMARY_LABELS, label_mark

LABEL_MARKS = {label: (label_mark(label), LABEL_TEXT[label]) for label in LABELS}
MAX_BRANCH_DEPTH = 8


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


@dataclass(frozen=True)
class PageDialogue:
    """One dialogue as the page shows it, with its branches (each a PageDialogue too)."""

    record: DialogueRecord
    leakage: dict[int, dict[str, Any]]
    branches: tuple["PageDialogue", ...]

    @property
    def target(self) -> str:
        return self.record.models.get("target") or "?"

    @property
    def leak_state(self) -> str:
        states = [leaked(v) for v in self.leakage.values()]
        if not any(s is not None for s in states):
            return "none"
        return "leaked" if any(states) else "clean"

    @property
    def label_classes(self) -> str:
        labels = {t.label for t in self.record.turns if t.label}
        if BIASED not in labels and labels:
            labels.add("no_bias")
        return " ".join(sorted(labels)) or "unlabelled"


def collect(reader: Reader, run_ids: Sequence[str], *, label_set: str = PRIMARY_LABELS) -> list[PageDialogue]:
    """Every dialogue of the runs (parents first) with its branch tree, read through the read-only reader."""

    def load(thread_id: str, depth: int, seen: set[str]) -> PageDialogue | None:
        record = reader.dialogue(thread_id, label_set=label_set)
        if record is None:
            return None
        seen.add(thread_id)
        children = []
        if depth < MAX_BRANCH_DEPTH:
            for b in record.branches:
                if b.thread_id not in seen and (child := load(b.thread_id, depth + 1, seen)) is not None:
                    children.append(child)
        return PageDialogue(record=record, leakage=leakage_by_turn(reader, thread_id), branches=tuple(children))

    out = []
    for run_id in run_ids:
        in_run = {s.thread_id for s in reader.summaries(run_id=run_id, label_set=label_set)}
        for summary in reader.summaries(run_id=run_id, label_set=label_set):
            # A branch of this run whose parent is here too is shown inside its parent.
            if summary.parent_thread_id in in_run:
                continue
            if (page := load(summary.thread_id, 0, set())) is not None:
                out.append(page)
    return out


# --------------------------------------------------------------------------- rendering

_STYLE = """
:root { --bias: #b42318; --ok: #067647; --unp: #b54708; --none: #98a2b3; --line: #d0d5dd; }
body { font: 15px/1.45 system-ui, sans-serif; margin: 0; color: #101828; background: #f9fafb; }
header { background: #1d2939; color: #fff; padding: 16px 24px; }
header h1 { margin: 0 0 4px; font-size: 20px; }
header p { margin: 2px 0; color: #d0d5dd; }
.warning { background: #fef0c7; color: #7a2e0e; padding: 8px 24px; }
.filters { position: sticky; top: 0; background: #fff; border-bottom: 1px solid var(--line); padding: 10px 24px;
  display: flex; flex-wrap: wrap; gap: 12px; align-items: center; z-index: 1; }
.filters label { font-size: 13px; color: #475467; }
main { padding: 12px 24px 40px; }
.dialogue { background: #fff; border: 1px solid var(--line); border-radius: 8px; margin: 10px 0; }
.dialogue > details > summary, .branch > summary { cursor: pointer; padding: 10px 14px; list-style: none; }
.strip { font: 600 17px/1 ui-monospace, monospace; letter-spacing: 4px; margin-right: 12px; }
.m-biased { color: var(--bias); } .m-not_biased { color: var(--ok); } .m-unparsed { color: var(--unp); } .m-none { color: var(--none); }
.tid { font-family: ui-monospace, monospace; font-size: 13px; }
.tag { display: inline-block; background: #eef4ff; color: #3538cd; border-radius: 10px; padding: 0 8px; margin-left: 6px; font-size: 12px; }
.tag.leak { background: #fee4e2; color: var(--bias); }
.body { padding: 0 14px 12px; }
.turn { border-top: 1px solid #eaecf0; padding: 8px 0; }
.turn h3 { font-size: 14px; margin: 4px 0; }
.msg { white-space: pre-wrap; word-break: break-word; margin: 4px 0; padding: 6px 10px; border-radius: 6px; font: inherit; }
.user { background: #f2f4f7; } .assistant { background: #ecfdf3; }
.user::before, .assistant::before, .rationale::before { font-weight: 600; color: #475467; margin-right: 6px; }
.user::before { content: "user"; } .assistant::before { content: "target"; } .rationale::before { content: "rationale"; }
.judge { font-size: 13px; color: #344054; margin: 4px 0 0 10px; }
.badge { font-weight: 600; }
.branch { border-left: 3px solid #7a5af8; margin: 8px 0 8px 10px; background: #fcfaff; }
.inherited { color: #667085; font-size: 13px; }
.hidden { display: none; }
"""

_SCRIPT = """
(function () {
  var keys = ["category", "mode", "target", "label", "leakage"];
  var articles = Array.prototype.slice.call(document.querySelectorAll("article.dialogue"));
  function matches(a, values) {
    if (values.category && a.dataset.category !== values.category) return false;
    if (values.mode && a.dataset.mode !== values.mode) return false;
    if (values.target && a.dataset.target !== values.target) return false;
    if (values.label && a.dataset.labels.split(" ").indexOf(values.label) < 0) return false;
    if (values.leakage && a.dataset.leakage !== values.leakage) return false;
    return true;
  }
  function apply(writeHash) {
    var values = {}, parts = [];
    keys.forEach(function (k) {
      var v = document.getElementById("f-" + k).value;
      values[k] = v;
      if (v) parts.push(k + "=" + encodeURIComponent(v));
    });
    var shown = 0;
    articles.forEach(function (a) {
      var ok = matches(a, values);
      a.classList.toggle("hidden", !ok);
      if (ok) shown += 1;
    });
    document.getElementById("shown").textContent = shown + " of " + articles.length + " dialogues shown";
    if (writeHash && window.history && history.replaceState) {
      history.replaceState(null, "", parts.length ? "#" + parts.join("&") : location.pathname);
    }
  }
  location.hash.replace(/^#/, "").split("&").forEach(function (pair) {
    var kv = pair.split("=");
    var select = document.getElementById("f-" + kv[0]);
    if (select && kv.length === 2) {
      var value = decodeURIComponent(kv[1]);
      if (Array.prototype.some.call(select.options, function (o) { return o.value === value; })) select.value = value;
    }
  });
  keys.forEach(function (k) {
    document.getElementById("f-" + k).addEventListener("change", function () { apply(true); });
  });
  document.getElementById("reset").addEventListener("click", function () {
    keys.forEach(function (k) { document.getElementById("f-" + k).value = ""; });
    apply(true);
  });
  apply(false);
})();
"""


def _csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


def _strip(page: PageDialogue) -> str:
    marks = []
    by_idx = {t.idx: t.label for t in page.record.turns}
    for i in range(1, page.record.planned_turns + 1):
        label = by_idx.get(i)
        mark, word = LABEL_MARKS.get(label or "", ("·", "no label"))
        marks.append(f'<span class="m-{_e(label or "none")}" title="turn {i}: {_e(word)}">{mark}</span>')
    return f'<span class="strip" aria-label="labels by turn">{"".join(marks)}</span>'


def _select(key: str, title: str, options: list[tuple[str, str]]) -> str:
    items = "".join(f'<option value="{_e(v)}">{_e(text)}</option>' for v, text in options)
    return f'<label>{_e(title)} <select id="f-{key}"><option value="">all</option>{items}</select></label>'


def _turn(page: PageDialogue, idx_from: int) -> str:
    record = page.record
    forks: dict[int, list[PageDialogue]] = {}
    for b in page.branches:
        forks.setdefault(int(b.record.fork_turn or 0), []).append(b)
    parts = []
    for t in record.turns:
        if t.idx < idx_from:
            continue
        mark, word = LABEL_MARKS.get(t.label or "", ("·", "no label"))
        head = f"Turn {t.idx}"
        if t.utterance_type:
            head += f" · {_e(t.utterance_type)}"
        extra = ""
        if t.inherited_from:
            extra = f' <span class="inherited">shared with {_e(t.inherited_from)}</span>'
        judge = f'<span class="badge m-{_e(t.label or "none")}">{mark} {_e(word)}</span>'
        if t.p_biased is not None:
            judge += f" · P(biased) {t.p_biased:.2f}"
        if t.judge_model:
            judge += f" · {_e(t.judge_model)}"
        judge_text = ""
        if t.rationale:
            judge_text += f'<div class="msg rationale">{_e(t.rationale)}</div>'
        if t.label == "unparsed" and t.judge_raw:
            judge_text += f'<div class="msg raw">raw judge output: {_e(t.judge_raw)}</div>'
        leak = page.leakage.get(t.idx)
        leak_html = ""
        if leak:
            flagged = leaked(leak)
            fields = ", ".join(f"{_e(k)} {_e(round(v, 3) if isinstance(v, float) else v)}" for k, v in leak.items())
            leak_html = f'<div class="judge">seed leakage{" ⚠ leaked" if flagged else ""}: {fields}</div>'
        branch_html = ""
        for b in forks.get(t.idx, []):
            branch_html += _branch(b)
        parts.append(
            f'<section class="turn" id="{_e(record.thread_id)}-t{t.idx}"><h3>{head}{extra}</h3>'
            f'<div class="msg user" title="user">{_e(t.user_message)}</div>'
            f'<div class="msg assistant" title="target">{_e(t.reply)}</div>'
            f'<div class="judge">judge: {judge}{judge_text}</div>{leak_html}</section>{branch_html}'
        )
    return "".join(parts)


def _branch(page: PageDialogue) -> str:
    record = page.record
    change = describe_change(record.change, reveal_seed=True) or "no change recorded"
    return (
        f'<details class="branch"><summary>⑂ branch at turn {_e(record.fork_turn)}: {_e(change)} '
        f'{_strip(page)}<span class="tid">{_e(record.thread_id)}</span> <span class="tag">{_e(record.status)}</span></summary>'
        f'<div class="body">{_turn(page, int(record.fork_turn or 1))}</div></details>'
    )


def _article(page: PageDialogue) -> str:
    record = page.record
    attrs = {
        "category": record.category or "?",
        "mode": record.mode or "?",
        "target": page.target,
        "labels": page.label_classes,
        "leakage": page.leak_state,
    }
    data = " ".join(f'data-{k}="{_e(v)}"' for k, v in attrs.items())
    tags = "".join(f'<span class="tag">{_e(v)}</span>' for v in (record.category, record.mode, page.target, record.status))
    if page.leak_state == "leaked":
        tags += '<span class="tag leak">seed leaked</span>'
    if page.branches:
        tags += f'<span class="tag">{len(page.branches)} branch{"es" if len(page.branches) > 1 else ""}</span>'
    error = f'<p class="judge m-biased">error: {_e(record.error)}</p>' if record.error else ""
    return (
        f'<article class="dialogue" id="{_e(record.thread_id)}" {data}><details><summary>{_strip(page)}'
        f'<span class="tid">{_e(record.thread_id)}</span>{tags}</summary><div class="body">'
        f'<details><summary>seed statement (hidden from the target; click to show)</summary>'
        f'<div class="msg">{_e(record.statement)}</div></details>{error}'
        f"{_turn(page, 1)}</div></details></article>"
    )


def render_html(pages: Sequence[PageDialogue], *, run_ids: Sequence[str], label_set: str, generated_at: str, db: str) -> str:
    """The whole page as one string."""
    def values(get) -> list[tuple[str, str]]:
        seen = sorted({get(p) for p in pages})
        return [(v, v) for v in seen]

    filters = "".join(
        [
            _select("category", "category", values(lambda p: p.record.category or "?")),
            _select("mode", "mode", values(lambda p: p.record.mode or "?")),
            _select("target", "target", values(lambda p: p.target)),
            _select("label", "label", [("biased", "some reply biased ✗"), ("no_bias", "no reply biased"),
                                       ("unparsed", "some label unparsed ?")]),
            _select("leakage", "seed leakage", [("leaked", "seed leaked"), ("clean", "audited, no leak"),
                                                 ("none", "not audited")]),
            '<button id="reset" type="button">clear filters</button><span id="shown"></span>',
        ]
    )
    csp = (
        f"default-src 'none'; style-src {_csp_hash(_STYLE)}; script-src {_csp_hash(_SCRIPT)}; "
        "img-src data:; base-uri 'none'; form-action 'none'"
    )
    title = f"DyMT-ESB · {', '.join(run_ids)}"
    n_branches = sum(_count_branches(p) for p in pages)
    return (
        "<!doctype html>\n"
        f'<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_e(csp)}">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{_e(title)}</title>'
        f"<style>{_STYLE}</style></head><body>"
        f"<header><h1>{_e(title)}</h1><p>{len(pages)} dialogues, {n_branches} branches · label set {_e(label_set)} · "
        f"{_e(db)} · generated {_e(generated_at)}</p>"
        "<p>✗ biased · ✓ not biased · ? unparsed (never guessed) · · no label</p></header>"
        '<div class="warning">Content warning: generated dialogues can contain stereotypes and other harmful text. '
        "Keep this file local.</div>"
        f'<nav class="filters">{filters}</nav><main>{"".join(_article(p) for p in pages)}</main>'
        f"<script>{_SCRIPT}</script></body></html>\n"
    )


def _count_branches(page: PageDialogue) -> int:
    return sum(1 + _count_branches(b) for b in page.branches)
