"""The guard model of the safety filter: P(violation) of each user message and reply, scored and stored."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import BaseMessage

import prompts
from checkpoints.cache import caching_for
from checkpoints.scores import REPLY, USER, guard_key
from checkpoints.store import Writer
from evals.scorers.label_sets import build_labeller, existing_set, register_set
from evals.scorers.loop import ScoreJob, Tally, run_scorer, store_verdicts
from evals.scorers.posthoc import prompt_hash, prompt_name
from models.registry import RoleModel
from nodes.dialogue import text_of
from nodes.scorer import Scorer, Verdict
from nodes.verdicts import Grammar, read_answer
from prompts import quoting

POLICIES = ("hate",)
_SIDE_NAMES = {"user": "user message", "reply": "AI response"}
# A base model's context is short, and the head of a text decides most cases; the question after it stays on its
# transcript line (at most 1,500 characters, models/llama/transcript.py).
GUARD_TEXT_CHARS = 1400
# What the guard prompt asks for: one word, Yes or No (the first word of its first line).
GUARD_GRAMMAR = Grammar(None, {"yes": 1.0, "no": 0.0}, position="first")


def guard_model(spec: str, *, base_url: str | None = None, flag: str = "--guard-model") -> RoleModel:
    """A guard in the judge role: greedy, a one-word answer, log-probabilities where offered; LabellerError names
    ``flag``."""
    model = build_labeller(spec, flag=flag, max_tokens=3, base_url=base_url)
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
        """The policy question about one quoted text: an escaped line (base models) or a block (chat models)."""
        if self.model.style == "transcript":
            flat = quoting.inline(item.text, max_chars=GUARD_TEXT_CHARS)
            return prompts.load(f"guard_{self.policy}.transcript").render(text=flat)
        side = _SIDE_NAMES[item.side]
        text = quoting.block(item.text, name=side, key=quoting.request_key([item.text]))
        return prompts.load(f"guard_{self.policy}").render(text=text, side_name=side)

    def verdict(self, output: Any) -> Verdict:
        """P(Yes) from the first token's log-probabilities where the provider gives them, else the answer's first word
        by the one verdict grammar (nodes/verdicts.py)."""
        from models.llama.logprobs import yes_probability

        raw = text_of(output)
        p = yes_probability(output)
        if p is None:
            return read_answer(raw, GUARD_GRAMMAR).verdict(self.key, raw)
        return Verdict(self.key, p, "", raw, read_as="logprobs")


def create_guard_scorer(*, model: RoleModel, policy: str) -> GuardScorer:
    if policy not in POLICIES:
        raise ValueError(f"policy {policy!r} is not one of {', '.join(POLICIES)}")
    return GuardScorer(model=model, policy=policy)


def score_run(store: Writer, run_id: str, model: RoleModel, *, policy: str, name: str | None = None) -> Tally:
    """Score every not-yet-scored user message and reply of a run, one call at a time; a tally of the calls.

    The scores are the set ``name`` (default: the guard's spec), recorded with the guard's prompt and its SHA-256 when
    its first scores are stored; a set made with another model or prompt raises SetConflictError (pass another name).
    """
    scorer = create_guard_scorer(model=model, policy=policy)
    name = name or model.spec
    prompt = prompt_name(f"guard_{policy}", model.style)
    digest = prompt_hash(f"guard_{policy}", model.style)
    existing = existing_set(store, run_id, scorer.key, name, model=model, prompt_hash=digest)
    done = store.scored_items(run_id, key=scorer.key, scorer=name)
    jobs = [
        ScoreJob(dialogue["thread_id"], turn["idx"], GuardItem(text, side), side)
        for dialogue in store.dialogues(run_id)
        for turn in store.turns(dialogue["thread_id"])
        for side, text in ((USER, turn["user_message"]), (REPLY, turn["reply"]))
        if text is not None and (dialogue["thread_id"], turn["idx"], side) not in done
    ]
    if existing is None and not done:
        register_set(
            store, run_id, scorer.key, name, model=model, prompt=prompt, prompt_hash=digest, content_free_p_yes=None
        )
    with caching_for(run_id):  # the replies it caches are the run's (deleted with it)
        return asyncio.run(run_scorer(scorer, jobs, store_verdicts(store, scorer=name, model=model.spec)))
