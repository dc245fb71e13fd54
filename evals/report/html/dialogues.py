"""The dialogues of a report page: read through the read-only reader, packed as a small index and compressed bodies.

The index (one entry per dialogue and branch: grouping keys, labels by turn, the branch tree)
is plain JSON the page reads at once. Bodies (messages, rationales, leakage, a thinking target's reasoning) are
JSON in chunks of whole trees, written as codes into one word list of the page and gzip-compressed, decoded in the
browser only when a dialogue is opened, so a paper-size run stays a small file that shows its
results at once.

The compressed bytes sit in the page one byte per character (the page is windows-1252, whose
256 characters are one byte each), not in base64 (a third more): only the four bytes the HTML
parser would change or that could end the block (NUL, CR, ``<``) and the escape byte ``=`` itself
are written as ``=`` and a digit.
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from checkpoints.branching import describe_change
from checkpoints.chat_export import leakage_by_turn, leaked
from checkpoints.readers import Reader
from checkpoints.records import DialogueRecord
from checkpoints.vocabulary import BIASED, NOT_BIASED, PRIMARY_LABELS, UNPARSED
from evals.report.html.wordcode import Coder, word_list

MAX_BRANCH_DEPTH = 8
CHUNK_CHARS = 512 * 1024  # body JSON per chunk: opening a dialogue decodes one chunk only (larger: smaller file)
LABEL_CODES: dict[str, str] = {BIASED: "b", NOT_BIASED: "n", UNPARSED: "u"}  # "-": no label
ESCAPES = {b"\x00": b"=0", b"\r": b"=1", b"<": b"=2", b"=": b"=3"}  # page.js undoes these, in this order
_ESCAPED = re.compile(rb"[\x00\r<=]")


@dataclass(frozen=True)
class PageDialogue:
    """One dialogue as the page shows it, with its branches (each a PageDialogue too)."""

    record: DialogueRecord
    leakage: dict[int, dict[str, Any]]
    branches: tuple[PageDialogue, ...]

    @property
    def target(self) -> str:
        return self.record.models.get("target") or "?"

    @property
    def leak_state(self) -> str:
        states = [leaked(v) for v in self.leakage.values()]
        if not any(s is not None for s in states):
            return "none"
        return "leaked" if any(states) else "clean"


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
        summaries = reader.summaries(run_id=run_id, label_set=label_set)
        in_run = {s.thread_id for s in summaries}
        for summary in summaries:
            # A branch of this run whose parent is here too is shown inside its parent.
            if summary.parent_thread_id in in_run:
                continue
            if (page := load(summary.thread_id, 0, set())) is not None:
                out.append(page)
    return out


def label_string(record: DialogueRecord) -> str:
    """One letter per planned turn: b biased, n not biased, u unparsed, - no label."""
    by_idx = {t.idx: t.label for t in record.turns}
    return "".join(LABEL_CODES.get(by_idx.get(i) or "", "-") for i in range(1, record.planned_turns + 1))


def _leak_text(fields: dict[str, Any]) -> list[Any]:
    """[flagged (1/0/None), "field value, ..."] for one turn's leakage audit."""
    flag = leaked(fields)
    text = ", ".join(f"{k} {round(v, 3) if isinstance(v, float) else v}" for k, v in fields.items())
    return [None if flag is None else int(flag), text]


def _body(page: PageDialogue) -> dict[str, Any]:
    """Messages, labels and rationales from the fork on (a branch's earlier turns are its parent's)."""
    record = page.record
    start = int(record.fork_turn or 1) if record.parent_thread_id else 1
    judges = {t.judge_model for t in record.turns if t.judge_model}
    judge = judges.pop() if len(judges) == 1 else None  # one judge for the dialogue: said once, not per turn
    turns = []
    for t in record.turns:
        if t.idx < start:
            continue
        leak = page.leakage.get(t.idx)
        row = [
            t.idx,
            t.user_message,
            t.reply,
            t.utterance_type,
            t.label,
            t.rationale,
            t.p_biased,
            None if judge else t.judge_model,
            t.judge_raw if t.label == UNPARSED else None,
            t.inherited_from,
            _leak_text(leak) if leak else None,
            t.reasoning,  # the target's reasoning: the page shows it folded
            [t.reasoning_carrier, t.reasoning_label] if t.reasoning else None,
        ]
        while row[-1] is None:  # trailing empty fields are left out; the page reads them as missing
            row.pop()
        turns.append(row)
    return {"statement": record.statement, "error": record.error, "judge": judge, "turns": turns}


def _node(page: PageDialogue, parent: int, chunk: int, nodes: list[dict[str, Any]], bodies: dict[str, Any]) -> int:
    record = page.record
    index = len(nodes)
    node: dict[str, Any] = {
        "id": record.thread_id,
        "run": record.run_id,
        "cat": record.category or "?",
        "mode": record.mode or "?",
        "tgt": page.target,
        "st": record.status or "?",
        "lab": label_string(record),
        "leak": page.leak_state,
        "par": parent,
        "fork": record.fork_turn,
        "chg": describe_change(record.change, reveal_seed=True) if parent >= 0 else "",
        "kids": [],
        "chunk": chunk,
    }
    nodes.append(node)
    bodies[record.thread_id] = _body(page)
    node["kids"] = [_node(b, index, chunk, nodes, bodies) for b in page.branches]
    return index


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def pack(pages: Sequence[PageDialogue]) -> tuple[dict[str, Any], bytes]:
    """(index, blob): the index as data (``chunks`` holds each chunk's [start, end) in the blob, ``words`` the word
    list's); the blob the escaped gzip streams: the word list (JSON), then each chunk's JSON {thread id: body} as
    word codes (:mod:`evals.report.html.wordcode`), one after the other."""
    nodes: list[dict[str, Any]] = []
    roots: list[int] = []
    texts: list[str] = []
    bodies: dict[str, Any] = {}
    size = 0
    for page in pages:
        tree: dict[str, Any] = {}
        roots.append(_node(page, -1, len(texts), nodes, tree))
        bodies.update(tree)
        size += len(_compact(tree))
        if size >= CHUNK_CHARS:
            texts.append(_compact(bodies))
            bodies, size = {}, 0
    if bodies:
        texts.append(_compact(bodies))
    coder = Coder(word_list(texts))
    parts = [_encode(_compact(coder.words).encode("utf-8"))] + [_encode(coder.encode(t)) for t in texts]
    spans, start = [], 0
    for part in parts:
        spans.append([start, start + len(part)])
        start += len(part)
    return {**_columns(nodes), "roots": roots, "words": spans[0], "chunks": spans[1:]}, b"".join(parts)


def unpack(index: dict[str, Any], blob: bytes) -> dict[str, Any]:
    """Every body back, {thread id: body}, from the packed blob (what page.js does in the browser, chunk by chunk)."""
    words = json.loads(gzip.decompress(decode(blob[slice(*index["words"])])))
    coder, bodies = Coder(words), {}
    for start, end in index["chunks"]:
        bodies.update(json.loads(coder.decode(gzip.decompress(decode(blob[start:end])))))
    return bodies


COLUMNS = ("id", "run", "cat", "mode", "tgt", "st", "lab", "leak", "par", "fork", "chg", "kids", "chunk")
_DICTIONARY = ("run", "cat", "mode", "tgt", "st", "leak")  # few distinct values: stored once, rows hold their number


def _columns(nodes: list[dict[str, Any]]) -> dict[str, Any]:
    """Nodes as rows of values (a third of the size of objects), repeated strings as numbers into ``dict``."""
    values = {c: sorted({str(n[c]) for n in nodes}) for c in _DICTIONARY}
    number = {c: {v: i for i, v in enumerate(vs)} for c, vs in values.items()}
    rows = [[number[c][str(n[c])] if c in number else n[c] for c in COLUMNS] for n in nodes]
    return {"cols": list(COLUMNS), "dict": values, "rows": rows}


def nodes_of(index: dict[str, Any]) -> list[dict[str, Any]]:
    """The index's rows back as one dict per dialogue (what page.js does on load)."""
    return [
        {c: index["dict"][c][v] if c in index["dict"] else v for c, v in zip(index["cols"], row)}
        for row in index["rows"]
    ]


def _encode(raw: bytes) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31, 9)  # gzip format, the largest match memory
    data = packer.compress(raw) + packer.flush()
    return _ESCAPED.sub(lambda m: ESCAPES[m.group()], data)


def decode(blob: bytes) -> bytes:
    """The compressed bytes back from their escaped form (what page.js does in the browser)."""
    back = {v[1:2]: k for k, v in ESCAPES.items()}
    return re.sub(rb"=([0-3])", lambda m: back[m.group(1)], blob)
