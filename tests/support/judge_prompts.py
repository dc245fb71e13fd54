"""Reading the judge's chat prompt back as the judge sees it: the statement, the earlier messages and the reply, each
taken out of its quoted frame (prompts/quoting.py), and what is left of the prompt around them.

Scripted judges and the injection tests use it: a judge that answers from the reply alone, and a check that the reply
is one quoted block whatever it contains.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

from nodes.dialogue import NO_HISTORY

_BEGIN = re.compile(r"^----- begin (.+?) ([0-9a-f]{12}) -----$", re.MULTILINE)
_STATEMENT = re.compile(r'\AStereotype: ("(?:[^"\\]|\\.)*")\n')


@dataclass(frozen=True)
class JudgePrompt:
    """The quoted parts of one judge request and its frame (``skeleton``: the text with each block as ``<name>``)."""

    statement: str
    context: list[dict[str, str]]
    reply: str
    key: str
    blocks: list[tuple[str, str]]
    skeleton: str


def blocks_of(text: str) -> tuple[str | None, list[tuple[str, str]], str]:
    """(key, [(name, content)] in order, the text with every block replaced by ``<name>``) of a prompt's blocks."""
    first = _BEGIN.search(text)
    if first is None:
        return None, [], text
    key = first.group(2)
    pattern = re.compile(
        rf"^----- begin (.+?) {key} -----\n(.*?)\n----- end \1 {key} -----$",
        re.MULTILINE | re.DOTALL,
    )
    found = [(m.group(1), m.group(2)) for m in pattern.finditer(text)]
    skeleton = pattern.sub(lambda m: f"<{re.sub(r' [0-9]+$', '', m.group(1))}>", text)
    return key, found, skeleton


def read_judge_prompt(text: str) -> JudgePrompt:
    """The judge's user message split into its parts; AssertionError if it is not one statement, its earlier
    messages and exactly one reply block."""
    statement = _STATEMENT.match(text)
    assert statement is not None, text[:200]
    key, found, skeleton = blocks_of(text)
    assert key is not None, "no quoted block in the judge's prompt"
    replies = [content for name, content in found if name == "reply"]
    assert len(replies) == 1, f"{len(replies)} reply blocks"
    context = [
        {"role": name.split()[0], "content": content} for name, content in found if name.endswith(tuple("0123456789"))
    ]
    return JudgePrompt(json.loads(statement.group(1)), context, replies[0], key, found, skeleton)


def legacy_digest(messages) -> bytes:
    """SHA-256 of a judge request's statement, earlier dialogue and reply as one text, written as the judge's prompt
    wrote them before it quoted them (``User:`` / ``Assistant:`` lines, the reply between triple quotes): the scripted
    judges of the tests that count labels draw from it, so their labels (and the counts those tests check) stay the
    same whatever frame the prompt puts around the texts."""
    parts = read_judge_prompt(str(messages[-1].content))
    history = "\n".join(f"{'User' if m['role'] == 'user' else 'Assistant'}: {m['content']}" for m in parts.context)
    text = (
        f'Stereotype: "{parts.statement}"\n\nEarlier conversation:\n{history or NO_HISTORY}\n\n'
        f'Reply under review:\n"""\n{parts.reply}\n"""'
    )
    return hashlib.sha256(text.strip().encode()).digest()
