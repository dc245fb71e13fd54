"""The exporters: a stored dialogue as Markdown, a standalone HTML page or JSON, written atomically."""

from __future__ import annotations

import html
import io
import json
import os
import re
import tempfile
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from rich.console import Console

from checkpoints.branching import describe_change
from checkpoints.records import DialogueRecord, TurnRecord
from viewer.render import (
    PRINTED_SEED_HINT,
    SEED_MASK,
    dialogue_renderables,
    displayable,
    label_badge,
    leakage_note,
    turn_count,
)

EXPORT_FORMATS = (".md", ".html", ".json")
EXPORT_WIDTH = 100


def masked(record: DialogueRecord) -> DialogueRecord:
    """The record with its seed statement (and a branch's changed one) replaced by the mask, as every output shows it by
    default."""

    def hide(change: Any) -> Any:
        if isinstance(change, str):
            try:
                change = json.loads(change)
            except ValueError:
                return change
        if isinstance(change, dict) and "seed_statement" in change:
            return {**change, "seed_statement": SEED_MASK}
        return change

    branches = tuple(replace(b, change=hide(b.change)) for b in record.branches)
    return replace(
        record,
        statement=SEED_MASK if record.statement else record.statement,
        change=hide(record.change),
        branches=branches,
    )


def export_json(record: DialogueRecord, *, reveal_seed: bool = False) -> str:
    record = record if reveal_seed else masked(record)
    data = {
        "format": "dymt-esb.dialogue/1",
        "thread_id": record.thread_id,
        "dialogue": {
            k: v for k, v in asdict(record).items() if k not in ("turns", "branches", "coherence", "run_config")
        },
        "run": record.run_config,
        "labels": "".join(record.label_marks()),
        "turns": [asdict(t) for t in record.turns],
        "branches": [asdict(b) | {"label_string": b.label_string} for b in record.branches],
        "coherence": [asdict(c) for c in record.coherence],
    }
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def export_markdown(record: DialogueRecord, *, reveal_seed: bool = False) -> str:
    """Markdown with every stored text escaped, so model output reads literally; the seed masked unless
    ``reveal_seed``."""
    record = displayable(record if reveal_seed else masked(record))
    models = record.models
    rows = [
        ("Thread", record.thread_id),
        ("Run", record.run_id),
        ("Mode", record.mode),
        ("Category", record.category),
        ("Turns", turn_count(record)),
        ("Status", record.status),
        *((f"{role.title()} model", models[role]) for role in ("user", "target", "judge") if role in models),
        ("Seed", f"{record.seed_id}: {record.statement}" + ("" if reveal_seed else f" ({PRINTED_SEED_HINT})")),
    ]
    if record.parent_thread_id:
        rows.append(("Branch of", f"{record.parent_thread_id} from turn {record.fork_turn}"))
        if record.change:
            rows.append(("Change", describe_change(record.change)))
    rows.append(("Labels", " ".join(record.label_marks())))
    rows.extend(
        ("Coherence", f"{c.score:g} / 5" + (f" ({c.source})" if c.source else ""))
        for c in record.coherence
        if c.score is not None
    )
    if record.error:
        rows.append(("Error", record.error))
    out = [f"# Dialogue {_md(record.thread_id)}", "", "| | |", "|---|---|"]
    out += [f"| {k} | {_md(' '.join(str(v).split()) if v is not None else '')} |" for k, v in rows]
    out += ["", "The seed is shown only to the user simulator, never to the target.", ""]
    for turn in record.turns:
        badge = label_badge(turn.label).plain.strip()
        out += [f"## Turn {turn.idx} of {record.planned_turns}: {badge}", ""]
        if turn.inherited_from:
            out += [f"*Shared with {_md(turn.inherited_from)}.*", ""]
        out += [f"**User**{_md_model(turn.user_model, turn.utterance_type)}:", "", _md_quote(turn.user_message), ""]
        if (leak := leakage_note(turn)) is not None:
            out += [f"*{_md(leak)}*", ""]
        out += [f"**Target**{_md_model(turn.target_model)}:", "", _md_quote(turn.reply), ""]
        if turn.non_reply:
            out += [f"*Not a reply: {_md(turn.non_reply)}.*", ""]
        if turn.reasoning:
            out += _md_reasoning(turn)
        judge = f"**Judge**{_md_model(turn.judge_model)}: {badge}"
        if turn.p_biased is not None:
            judge += f", P(biased) {turn.p_biased:.2f}"
        out += [judge, ""]
        if turn.rationale:
            out += [_md_quote(turn.rationale), ""]
        if turn.label == "unparsed" and turn.judge_raw:
            out += ["Raw judge output:", "", _md_quote(turn.judge_raw), ""]
        for r in turn.refusals:
            verdict = {True: "refused", False: "answered", None: "unparsed"}[r.refused]
            out += [f"**Refusal**{_md_model(r.source)}: {verdict}", ""]
    if record.branches:
        out += ["## Branches", "", "| Branch | At turn | Change | Labels | Status |", "|---|---|---|---|---|"]
        out += [
            f"| {_md(b.thread_id)} | {b.fork_turn or '?'} | {_md(describe_change(b.change))} | {b.label_string} | "
            f"{_md(b.status or '')} |"
            for b in record.branches
        ]
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def export_html(record: DialogueRecord, *, reveal_seed: bool = False) -> str:
    """The --print rendering as a standalone HTML page (rich escapes every text)."""
    recorder = Console(
        record=True, width=EXPORT_WIDTH, file=io.StringIO(), force_terminal=True, color_system="truecolor"
    )
    for renderable in dialogue_renderables(record if reveal_seed else masked(record), reveal_seed=reveal_seed):
        recorder.print(renderable)
    title = html.escape(f"DyMT-ESB dialogue {record.thread_id}").replace("{", "{{").replace("}", "}}")
    page = (
        '<!DOCTYPE html>\n<html>\n<head>\n<meta charset="UTF-8">\n'
        f"<title>{title}</title>\n"
        "<style>\n{stylesheet}\nbody {{ color: {foreground}; background-color: {background}; }}\n</style>\n"
        "</head>\n<body>\n<pre style=\"font-family: Menlo, 'DejaVu Sans Mono', consolas, 'Courier New', monospace\">"
        "<code>{code}</code></pre>\n</body>\n</html>\n"
    )
    return recorder.export_html(code_format=page)


EXPORTERS = {".md": export_markdown, ".html": export_html, ".json": export_json}


def write_export(record: DialogueRecord, path: Path, *, reveal_seed: bool = False) -> None:
    """Write atomically, owner-only (it holds generated text that may be harmful); the seed masked unless
    ``reveal_seed``."""
    text = EXPORTERS[path.suffix.lower()](record, reveal_seed=reveal_seed)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


_MD_INLINE = set("\\`*_[]<>|~&#")
_MD_LINE_START = re.compile(r"^(\s*)([-+=]|\d+(?=[.)]))")


def _md(text: str) -> str:
    """Escape Markdown and HTML syntax (CommonMark backslash escapes) so the text reads literally."""
    escaped = "".join(f"\\{ch}" if ch in _MD_INLINE else ch for ch in text)
    # A list item or underline marker only counts at the start of a line.
    return _MD_LINE_START.sub(
        lambda m: m.group(1) + (f"\\{m.group(2)}" if not m.group(2).isdigit() else m.group(2) + "\\"), escaped, count=1
    )


def _md_reasoning(turn: TurnRecord) -> list[str]:
    """The target's reasoning, folded (a details block GitHub and most Markdown viewers fold): the user and the judge
    saw neither it nor any of it."""
    about = f"{len((turn.reasoning or '').split())} words, {turn.reasoning_carrier or 'split off the reply'}"
    if turn.reasoning_label:
        about += f"; judged {label_badge(turn.reasoning_label).plain.strip()}"
    summary = html.escape(f"Reasoning ({about}; seen by neither the user nor the judge)")
    return ["<details><summary>" + summary + "</summary>", "", _md_quote(turn.reasoning), "", "</details>", ""]


def _md_quote(text: str | None) -> str:
    if not text:
        return "> *(none stored)*"
    return "\n".join(f"> {_md(line)}" if line.strip() else ">" for line in text.splitlines())


def _md_model(model: str | None, extra: str | None = None) -> str:
    bits = [b for b in (model, extra) if b]
    return f" ({_md(', '.join(bits))})" if bits else ""
