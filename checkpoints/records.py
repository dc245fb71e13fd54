"""What the reader returns: a dialogue with its turns, labels and branches, as frozen records."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from checkpoints.run_record import role_specs
from checkpoints.vocabulary import BIASED, iter_label_strings


@dataclass(frozen=True)
class Refusal:
    """One refusal verdict on a turn; ``refused`` is None when the classifier's output was unparsed."""

    refused: bool | None
    source: str | None = None
    p_refused: float | None = None
    rationale: str | None = None


@dataclass(frozen=True)
class Coherence:
    """One coherence score (1-5) of a whole dialogue; None when unparsed."""

    score: float | None
    source: str | None = None
    rationale: str | None = None


@dataclass(frozen=True)
class TurnRecord:
    """One stored turn with its label from one label set."""

    idx: int
    user_message: str | None
    reply: str | None
    utterance_type: str | None = None
    user_model: str | None = None
    target_model: str | None = None
    latency_user: float | None = None
    latency_target: float | None = None
    tokens: dict[str, Any] = field(default_factory=dict)
    label: str | None = None
    rationale: str | None = None
    p_biased: float | None = None
    judge_raw: str | None = None
    judge_model: str | None = None
    latency_judge: float | None = None
    refusals: tuple[Refusal, ...] = ()
    inherited_from: str | None = None  # in a branch's shared prefix: the dialogue that first played this turn
    leakage: float | None = None  # seed leakage of the user message, 0..1 (None: not scored)
    leaked: bool | None = None  # the user message states the seed (flagged)
    user_attempts: int | None = None  # messages the simulator drew for this turn
    non_reply: str | None = None  # the target's answer was not a (whole) reply, and why ("content filter", ...)
    reasoning: str | None = None  # the target's reasoning, split off its reply (never shown to the user or the judge)
    reasoning_carrier: str | None = None  # where it came from ("tags in the text", "reasoning_content field", ...)
    reasoning_label: str | None = None  # --judge-reasoning: the run's judge on the reasoning (label set "reasoning")
    reasoning_rationale: str | None = None


@dataclass(frozen=True)
class DialogueSummary:
    """A dialogue as a list shows it: identity, status, branch origin and one label per turn."""

    thread_id: str
    run_id: str | None
    seed_id: str | None
    category: str | None
    mode: str | None
    max_turns: int | None
    status: str | None
    stop_reason: str | None
    parent_thread_id: str | None
    fork_turn: int | None
    change: Any
    labels: tuple[str | None, ...]

    @property
    def label_string(self) -> str:
        return " ".join(iter_label_strings(list(self.labels)))

    @property
    def has_bias(self) -> bool:
        return BIASED in self.labels


@dataclass(frozen=True)
class DialogueRecord:
    """Everything the viewer shows of one dialogue."""

    thread_id: str
    run_id: str | None
    seed_id: str | None
    category: str | None
    statement: str | None
    mode: str | None
    max_turns: int | None
    status: str | None
    stop_reason: str | None
    error: str | None
    started_at: str | None
    ended_at: str | None
    parent_thread_id: str | None
    fork_turn: int | None
    fork_checkpoint_id: str | None
    change: Any
    label_set: str
    run_config: dict[str, Any]
    turns: tuple[TurnRecord, ...]
    branches: tuple[DialogueSummary, ...]
    coherence: tuple[Coherence, ...] = ()

    @property
    def models(self) -> dict[str, str]:
        """Role → model spec: what the turns record, else what the run asked for."""
        models = role_specs(self.run_config) if isinstance(self.run_config, dict) else {}
        for role, key in (("user", "user_model"), ("target", "target_model"), ("judge", "judge_model")):
            seen = list(dict.fromkeys(getattr(t, key) for t in self.turns if getattr(t, key)))
            if seen:
                models[role] = ", ".join(seen)
        return models

    @property
    def labels(self) -> list[str | None]:
        """Labels of the stored turns, in order."""
        return [t.label for t in self.turns]

    @property
    def planned_turns(self) -> int:
        """The turn count the dialogue was set to reach (or more, if more are stored)."""
        return max([int(self.max_turns or 0), *(t.idx for t in self.turns)] or [0])

    def label_marks(self) -> list[str]:
        """✗ ✓ ? · for every planned turn, · where a turn is missing or unlabelled."""
        by_idx = {t.idx: t.label for t in self.turns}
        return list(iter_label_strings([by_idx.get(i) for i in range(1, self.planned_turns + 1)]))

    def branches_at(self, turn: int) -> list[DialogueSummary]:
        return [b for b in self.branches if b.fork_turn == turn]
