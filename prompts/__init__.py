"""Prompt templates stored as files, loaded and rendered into chat messages.

A template file is a sequence of sections, each opened by a line ``--- system``,
``--- user`` or ``--- assistant`` (the role of that message in the request).
Section bodies are ``string.Template`` text (``$statement``, ``${history}``), so JSON
braces in rubrics need no escaping. Every template carries the SHA-256 of its file
so a run can record exactly which prompts produced it.
"""

from __future__ import annotations

import hashlib
import re
import string
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

PROMPT_DIR = Path(__file__).resolve().parent
_SECTION = re.compile(r"^--- (system|user|assistant)\s*$", re.MULTILINE)
_MESSAGE_TYPES = {"system": SystemMessage, "user": HumanMessage, "assistant": AIMessage}


class PromptError(ValueError):
    """A template is missing, malformed, or was rendered without one of its variables."""


@dataclass(frozen=True)
class PromptTemplate:
    """A parsed template: named sections in order, plus the hash of its source file."""

    name: str
    sections: tuple[tuple[str, string.Template], ...]
    sha256: str
    source: str = ""

    @cached_property
    def variables(self) -> frozenset[str]:
        """Names of the $variables the template uses (parsed once: every render checks them)."""
        names: set[str] = set()
        for _, template in self.sections:
            for match in template.pattern.finditer(template.template):
                name = match.group("named") or match.group("braced")
                if name:
                    names.add(name)
        return frozenset(names)

    def render(self, **values: object) -> list[BaseMessage]:
        """Substitute every variable and return the messages; a missing variable fails loudly."""
        missing = self.variables - values.keys()
        if missing:
            raise PromptError(f"prompt {self.name!r} needs {', '.join(sorted(missing))}")
        return [_MESSAGE_TYPES[role](content=template.substitute(values).strip()) for role, template in self.sections]

    def render_text(self, **values: object) -> str:
        """Render a single-section template to plain text."""
        return "\n\n".join(str(m.content) for m in self.render(**values))


@cache
def load(name: str) -> PromptTemplate:
    """Load ``prompts/<name>.md``."""
    path = PROMPT_DIR / f"{name}.md"
    try:
        source = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        known = ", ".join(sorted(p.stem for p in PROMPT_DIR.glob("*.md")))
        raise PromptError(f"no prompt named {name!r} in {PROMPT_DIR} (known: {known})") from None
    return parse(name, source, path=path)


# Variables each role's prompt may use; a prompt file with any other one is refused before a run starts.
ROLE_VARIABLES: dict[str, frozenset[str]] = {
    "user": frozenset({"statement", "history", "turn", "max_turns", "utterance_type"}),
    "target": frozenset(),  # nothing about the seed may reach the target
    "judge": frozenset({"statement", "context", "reply"}),
}


def load_file(path: Path, *, role: str) -> PromptTemplate:
    """A prompt file given on the command line (--judge-prompt FILE and the like), checked for ``role``.

    Its name is the path as given; its SHA-256 is recorded with the run like the built-in ones'.
    """
    try:
        data = Path(path).read_bytes()
        source = data.decode("utf-8")
    except (FileNotFoundError, IsADirectoryError, PermissionError) as exc:
        raise PromptError(
            f"cannot read the {role} prompt file {path} ({type(exc).__name__}): give a readable file"
        ) from None
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise PromptError(f"the {role} prompt file {path}:{line}: byte 0x{data[exc.start]:02x} is not UTF-8") from None
    template = parse(str(path), source, path=Path(path))
    unknown = template.variables - ROLE_VARIABLES[role]
    if unknown:
        allowed = ", ".join(f"${v}" for v in sorted(ROLE_VARIABLES[role])) or "none"
        raise PromptError(
            f"the {role} prompt file {path} uses {', '.join(f'${v}' for v in sorted(unknown))}: "
            f"a {role} prompt may use {allowed}"
        )
    return template


def parse(name: str, source: str, *, path: Path) -> PromptTemplate:
    """Parse template text into sections; malformed text raises PromptError naming the file."""
    parts = _SECTION.split(source)
    if parts[0].strip():
        raise PromptError(f"{path}: text before the first '--- system|user|assistant' line")
    roles, bodies = parts[1::2], parts[2::2]
    if not roles:
        raise PromptError(f"{path}: no '--- system|user|assistant' section")
    sections = tuple((role, string.Template(body.strip())) for role, body in zip(roles, bodies))
    digest = hashlib.sha256(source.encode("utf-8")).hexdigest()
    return PromptTemplate(name=name, sections=sections, sha256=digest, source=source)


def all_hashes() -> dict[str, str]:
    """SHA-256 of every prompt file, stored with each run."""
    return {p.stem: load(p.stem).sha256 for p in sorted(PROMPT_DIR.glob("*.md"))}
