"""What a run says while it plays, as events: a command renders them with rich, a notebook its own way.

``dymt.run(..., on_event=f)`` calls ``f(event)`` for each, and ``async for event in dymt.astream(...)`` yields them
(the last one is :class:`RunEnded` with the result). The callback is called from the thread that plays the run
(and, for outages, from the run's own watcher thread): keep ``f`` quick. ``RunStarted.status`` is a live view for
displays that poll (calls so far, outages now), so an event need not be sent for every tick.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from models.circuit import OutageStatus

# a dialogue this invocation is done with (paused: stopped as asked, to be continued by dymt.resume)
ENDED: frozenset[str] = frozenset({"finished", "failed", "skipped", "held", "paused"})


class RunStatus(Protocol):
    """A playing run, read live: what a progress display polls between events."""

    def calls(self) -> int: ...
    def outages(self) -> list[OutageStatus]: ...
    def cost(self) -> float | None: ...
    def muted(self) -> bool: ...


@dataclass(frozen=True)
class RunStarted:
    """The run is about to play ``dialogues`` dialogues of ``turns`` turns (skipped ones included)."""

    run_id: str
    dialogues: int
    turns: int
    resume: str
    status: RunStatus = field(repr=False, compare=False)


@dataclass(frozen=True)
class DialogueProgress:
    """A dialogue moved: ``turns_done`` is its count of stored turns now; ``event`` says what happened."""

    run_id: str
    thread_id: str
    event: str
    turns_done: int

    @property
    def ended(self) -> bool:
        return self.event in ENDED


@dataclass(frozen=True)
class OutageBegan:
    """A provider endpoint stopped answering: its calls wait while a probe checks (``status`` says for how long)."""

    run_id: str
    status: OutageStatus


@dataclass(frozen=True)
class OutageEnded:
    """An endpoint answers again after ``down_s`` seconds unreachable."""

    run_id: str
    endpoint: str
    down_s: float


@dataclass(frozen=True)
class Paused:
    """Dialogues stopped as asked (``pause_after``): ``resume`` continues them."""

    run_id: str
    thread_ids: tuple[str, ...]
    resume: str


@dataclass(frozen=True)
class Labelled:
    """A labelling pass (``dymt.rejudge``, ``dymt.validate_judge``) moved: ``done`` of ``total`` replies labelled (or
    failed) so far."""

    done: int
    total: int


@dataclass(frozen=True)
class RunEnded:
    """The last event of ``dymt.astream``: the run's result (``dymt.RunResult``)."""

    run_id: str
    result: Any = field(repr=False)


Event = RunStarted | DialogueProgress | OutageBegan | OutageEnded | Paused | Labelled | RunEnded
EventSink = Callable[[Event], None]


def ignore(_: Event) -> None:
    """The default sink: a script that wants no events gets none."""


class Collector:
    """A sink that keeps every event in order (for tests and notebooks): ``dymt.run(..., on_event=c)``; ``c.events``."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def __call__(self, event: Event) -> None:
        self.events.append(event)

    def of(self, kind: type) -> list:
        return [e for e in self.events if isinstance(e, kind)]
