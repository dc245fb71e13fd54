"""Run ids and thread ids: made here only, and read back here only.

A dialogue's thread id is stable, so playing a run id again finds its dialogues:

- ``RUN:SEED:MODE`` in a run with one target (as runs always were, so older runs resume);
- ``RUN:SEED:MODE:TARGET-SPEC`` in a run with several targets;
- ``...#K`` for repeated sample K > 0 (``graph.run --samples``): sample 0 keeps the plain id;
- ``PARENT/tK-xxxxxx`` for a branch of ``PARENT`` at turn K: its lineage reads off the id.

A new run id is ``run-YYYYmmdd-HHMMSS-xxxx`` (``branch-...`` for a branch run), in UTC.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime

_SAMPLE = re.compile(r"#(\d+)$")
_BRANCH = re.compile(r"^(?P<parent>.+)/t(?P<turn>\d+)-[0-9a-f]{6}$")


# A new run's id: letters, digits, '.', '_' and '-', starting with a letter or digit, at most 64 characters. Ids a
# thread id (RUN:SEED:MODE, a branch's /, a sample's #) and a shell both read as one word; stores holding runs named
# otherwise stay readable and resumable.
RUN_ID_ALPHABET = "letters, digits, '.', '_' and '-' (starting with a letter or digit, at most 64)"
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def is_safe_run_id(run_id: str) -> bool:
    """Whether ``run_id`` is in the alphabet a new run's id is made of (:data:`RUN_ID_ALPHABET`)."""
    return _RUN_ID.fullmatch(run_id) is not None


def new_run_id(kind: str = "run") -> str:
    """A fresh run id (``kind``: ``run``, or ``branch`` for the run a branch command makes)."""
    return f"{kind}-{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def sample_thread_id(thread_id: str, sample: int) -> str:
    """The thread id of sample ``sample`` of a dialogue (``thread_id`` itself for sample 0)."""
    if sample < 0:
        raise ValueError(f"sample must be >= 0, got {sample}")
    return thread_id if sample == 0 else f"{thread_id}#{sample}"


def sample_of(thread_id: str) -> int:
    """Which sample a thread is (0 for a thread without a ``#k`` suffix, such as a branch)."""
    match = _SAMPLE.search(thread_id)
    return int(match.group(1)) if match else 0


@dataclass(frozen=True)
class DialogueThread:
    """What a played dialogue's thread id is made of (``target`` only in a run with several targets)."""

    run_id: str
    seed_id: str
    mode: str
    target: str | None = None
    sample: int = 0

    @property
    def thread_id(self) -> str:
        plain = f"{self.run_id}:{self.seed_id}:{self.mode}" + (f":{self.target}" if self.target is not None else "")
        return sample_thread_id(plain, self.sample)

    @classmethod
    def parse(cls, thread_id: str, *, run_id: str) -> DialogueThread:
        """The parts of a dialogue thread id of run ``run_id`` (whose id may hold ``:``); a seed id must not hold ``:``.

        A mode is one word or ``fairmt:TRACK``; whatever follows it is the target spec. A branch's id is not a
        dialogue thread id (:func:`branch_parent` reads it). ValueError names an id that is not one of the run's.
        """
        rest = thread_id.removeprefix(f"{run_id}:")
        if rest == thread_id or _BRANCH.match(thread_id):
            raise ValueError(f"{thread_id!r} is not a dialogue thread id of run {run_id!r}")
        sample = sample_of(rest)
        rest = _SAMPLE.sub("", rest)
        seed_id, _, rest = rest.partition(":")
        words = rest.split(":")
        take = 2 if words[0] == "fairmt" and len(words) > 1 else 1
        mode, target = ":".join(words[:take]), ":".join(words[take:]) or None
        if not seed_id or not mode:
            raise ValueError(f"{thread_id!r} is not a dialogue thread id of run {run_id!r}")
        return cls(run_id, seed_id, mode, target, sample)


def dialogue_thread_id(run_id: str, seed_id: str, mode: str, *, target: str | None = None, sample: int = 0) -> str:
    """The stable thread id of one dialogue of a run (``target``: only in a run with several targets)."""
    return DialogueThread(run_id, seed_id, mode, target, sample).thread_id


def branch_thread_id(parent_thread_id: str, turn: int) -> str:
    """A new branch of ``parent_thread_id`` at ``turn``: ``PARENT/tK-xxxxxx``."""
    return f"{parent_thread_id}/t{turn}-{secrets.token_hex(3)}"


def branch_parent(thread_id: str) -> tuple[str, int] | None:
    """The (parent thread id, fork turn) a branch id names; None for a thread that is not a branch."""
    match = _BRANCH.match(thread_id)
    return (match.group("parent"), int(match.group("turn"))) if match else None
