"""The guard model of the safety filter: P(violation) of each user message and reply, scored and stored."""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import BaseMessage

import prompts
from checkpoints.cache import caching_for
from checkpoints.scores import REPLY, USER, guard_key
from checkpoints.store import Writer
from evals.scorers.label_sets import build_labeller
from evals.scorers.loop import ScoreJob, Tally, run_scorer, store_verdicts
from models.registry import RoleModel
from nodes.dialogue import text_of
from nodes.scorer import Scorer, Verdict

POLICIES = ("hate",)
_SIDE_NAMES = {"user": "user message", "reply": "AI response"}
_FIRST_WORD = re.compile(r"^\W*(yes|no)\b", re.IGNORECASE)
GUARD_TEXT_CHARS = 1500  # a base model's context is short; the head of a text decides most cases


def guard_model(spec: str, *, base_url: str | None = None) -> RoleModel:
    """A guard in the judge role: greedy, a one-word answer, log-probabilities where offered; LabellerError names
    --guard-model."""
    model = build_labeller(spec, flag="--guard-model", max_tokens=3, base_url=base_url)
    if model.spec.startswith("openai:"):
        model = RoleModel(
            model.spec,
            model.model_id,
            model.chat.bind(logprobs=True, top_logprobs=5),  # type: ignore[arg-type]
            model.style,
            model.sampling,
        )
    return model


@dataclass(frozen=True)
class GuardItem:
    """One text a guard judges: a user message or a target reply."""

    text: str
    side: str  # "user" or "reply"


class GuardScorer(Scorer[GuardItem]):
    """P(violation) of one text under a policy: Yes/No log-probabilities, else the guard's first word."""

    def __init__(self, *, model: RoleModel, policy: str) -> None:
        super().__init__(model=model)
        self.policy = policy
        self.key = guard_key(policy)

    def messages(self, item: GuardItem) -> list[BaseMessage]:
        if self.model.style == "transcript":
            flat = " ".join(item.text.split())[:GUARD_TEXT_CHARS]
            return prompts.load(f"guard_{self.policy}.transcript").render(text=flat)
        return prompts.load(f"guard_{self.policy}").render(text=item.text, side_name=_SIDE_NAMES[item.side])

    def verdict(self, output: Any) -> Verdict:
        from models.llama.logprobs import yes_probability

        raw = text_of(output)
        p = yes_probability(output)
        if p is None:
            match = _FIRST_WORD.match(raw)
            if match is None:
                return Verdict(self.key, None, "", raw, unscored="no Yes/No in the answer")
            p = float(match.group(1).lower() == "yes")
        return Verdict(self.key, p, "", raw)


def create_guard_scorer(*, model: RoleModel, policy: str) -> GuardScorer:
    if policy not in POLICIES:
        raise ValueError(f"policy {policy!r} is not one of {', '.join(POLICIES)}")
    return GuardScorer(model=model, policy=policy)


def score_run(store: Writer, run_id: str, model: RoleModel, *, policy: str) -> Tally:
    """Score every not-yet-scored user message and reply of a run, one call at a time; a tally of the calls."""
    scorer = create_guard_scorer(model=model, policy=policy)
    done = store.scored_items(run_id, key=scorer.key, scorer=model.spec)
    jobs = [
        ScoreJob(dialogue["thread_id"], turn["idx"], GuardItem(text, side), side)
        for dialogue in store.dialogues(run_id)
        for turn in store.turns(dialogue["thread_id"])
        for side, text in ((USER, turn["user_message"]), (REPLY, turn["reply"]))
        if text is not None and (dialogue["thread_id"], turn["idx"], side) not in done
    ]
    with caching_for(run_id):  # the replies it caches are the run's (deleted with it)
        return asyncio.run(run_scorer(scorer, jobs, store_verdicts(store, scorer=model.spec, model=model.spec)))
