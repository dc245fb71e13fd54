"""What a run costs: stored token counts per role × a pricing file, and estimates before a run.

A pricing file is TOML, one table per model spec with its price in USD per million tokens::

    ["openai:gpt-4o-mini"]
    input = 0.15
    output = 0.60

Cost is counted from the tokens stored with each turn (``user_*``, ``target_*``, ``judge_*``
input and output tokens, as the provider reported them). A thinking model's output tokens include its reasoning
(billed as output); the reasoning's share (``*_reasoning_tokens``: the provider's count, or estimated from the two
texts where it gave none) is shown apart: answer and reasoning tokens, and the USD of each. A reply served from the
response cache keeps the tokens of the call that produced it, so its cost counts too: the cost shown is what the
dialogues would cost called afresh, an upper bound on what was paid.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checkpoints.location import DbLocation, PostgresURL, parse_db
from checkpoints.paths import StoreError
from checkpoints.queries import StoreQueries
from checkpoints.readers import open_reader
from checkpoints.run_record import role_specs
from checkpoints.vocabulary import ROLES
from graph.config.experiment import read_toml

PRICE_KEYS = ("input", "output")
# Before any stored run of a spec: a prompt of this many tokens on turn 1 (system prompt, seed,
# instructions), growing by the user message and reply of every earlier turn.
BASE_PROMPT_TOKENS = 400


class PricingError(ValueError):
    """A pricing file that cannot be read or holds a wrong key or value; says which and the fix."""


@dataclass(frozen=True)
class Price:
    input: float  # USD per million input (prompt) tokens
    output: float  # USD per million output (completion) tokens

    def of(self, input_tokens: float, output_tokens: float) -> float:
        return (input_tokens * self.input + output_tokens * self.output) / 1_000_000


@dataclass(frozen=True)
class Pricing:
    path: Path
    prices: dict[str, Price]

    def get(self, spec: str) -> Price | None:
        return self.prices.get(spec)

    def missing(self, specs: Iterable[str]) -> list[str]:
        return sorted({s for s in specs if s not in self.prices})


def load_pricing(path: str | Path) -> Pricing:
    """Read and check a pricing file; every problem is one :class:`PricingError` line naming the file and the line."""
    path = Path(path).expanduser()
    data, source = read_toml(path, PricingError, what="pricing", flag="--pricing", hint=" (see examples/pricing.toml)")
    prices = {}
    usd = "(USD per million tokens)"
    for spec, entry in data.items():
        if ":" not in spec or not isinstance(entry, dict):
            table = f'{spec!r} must be a table named by a model spec, e.g. ["openai:gpt-4o-mini"] with input and output'
            raise PricingError(f"{source.at((spec,))}: {table}")
        unknown, missing = sorted(set(entry) - set(PRICE_KEYS)), [k for k in PRICE_KEYS if k not in entry]
        if unknown or missing:
            what = f"unknown key {unknown[0]!r}" if unknown else f"no {missing[0]!r}"
            raise PricingError(f'{source.at((spec, *unknown[:1]))}: ["{spec}"] has {what}: give input and output {usd}')
        for key in PRICE_KEYS:
            value = entry[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise PricingError(
                    f'{source.at((spec, key))}: ["{spec}"] {key} must be a number >= 0 {usd}, got {value!r}'
                )
        prices[spec] = Price(float(entry["input"]), float(entry["output"]))
    if not prices:
        raise PricingError(f"{path} prices no model: add a table per spec (see examples/pricing.toml)")
    return Pricing(path=path, prices=prices)


# --------------------------------------------------------------------------- spent


@dataclass
class RoleUsage:
    """Model calls and tokens of one role on one spec."""

    role: str
    spec: str
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    """Of ``output_tokens``: the reasoning's (the rest is the answers')."""

    def cost(self, pricing: Pricing | None) -> float | None:
        price = pricing.get(self.spec) if pricing else None
        return None if price is None else price.of(self.input_tokens, self.output_tokens)

    def reasoning_cost(self, pricing: Pricing | None) -> float | None:
        price = pricing.get(self.spec) if pricing else None
        return None if price is None else price.of(0, self.reasoning_tokens)


@dataclass
class Usage:
    """Calls and tokens by (role, spec): of a run, or of one dialogue."""

    by_role: dict[tuple[str, str], RoleUsage] = field(default_factory=dict)

    def add(self, role: str, spec: str | None, tokens: Mapping[str, Any]) -> None:
        inp, out = tokens.get(f"{role}_input_tokens"), tokens.get(f"{role}_output_tokens")
        if spec is None or (inp is None and out is None):
            return  # no model call (a scripted user) or a provider that reports no usage
        usage = self.by_role.setdefault((role, spec), RoleUsage(role, spec))
        usage.calls += int(tokens.get(f"{role}_calls") or 1)  # the judge's on the reply and the reasoning: 2
        usage.input_tokens += int(inp or 0)
        usage.output_tokens += int(out or 0)
        usage.reasoning_tokens += int(tokens.get(f"{role}_reasoning_tokens") or 0)

    def cost(self, pricing: Pricing | None) -> float | None:
        """Total USD, or None when any spec used has no price."""
        costs = [u.cost(pricing) for u in self.by_role.values()]
        return None if any(c is None for c in costs) else sum(costs)  # type: ignore[arg-type]

    def known_cost(self, pricing: Pricing) -> float:
        return sum(c for u in self.by_role.values() if (c := u.cost(pricing)) is not None)

    def known_reasoning_cost(self, pricing: Pricing) -> float:
        return sum(c for u in self.by_role.values() if (c := u.reasoning_cost(pricing)) is not None)


def _specs_of(row: Mapping[str, Any], models: Mapping[str, str]) -> dict[str, str | None]:
    return {
        "user": row.get("user_model") or models.get("user"),
        "target": row.get("target_model") or row.get("dialogue_target") or models.get("target"),
        "judge": row.get("judge_model") or models.get("judge"),
    }


def _add_row(usage: Usage, row: Mapping[str, Any], models: Mapping[str, str]) -> None:
    tokens = json.loads(row.get("tokens") or "{}")
    for role, spec in _specs_of(row, models).items():
        usage.add(role, spec, tokens)


def run_models(store: StoreQueries, run_id: str) -> dict[str, str]:
    run = store.get_run(run_id) or {"config": {}}
    return role_specs(run["config"])


def run_usage(store: StoreQueries, run_id: str) -> Usage:
    """Calls and tokens of every stored turn of a run (primary judge labels)."""
    usage = Usage()
    models = run_models(store, run_id)
    for row in store.token_rows(run_id=run_id):
        _add_row(usage, row, models)
    return usage


def usage_by_thread(store: StoreQueries, run_id: str) -> dict[str, Usage]:
    """The same, one Usage per dialogue (the cost cap tracks dialogues as they end)."""
    by_thread: dict[str, Usage] = {}
    models = run_models(store, run_id)
    for row in store.token_rows(run_id=run_id):
        _add_row(by_thread.setdefault(row["thread_id"], Usage()), row, models)
    return by_thread


def thread_usage(store: StoreQueries, thread_id: str, models: Mapping[str, str]) -> Usage:
    usage = Usage()
    for row in store.token_rows(thread_id=thread_id):
        _add_row(usage, row, models)
    return usage


def usage_summary(usage: Usage, pricing: Pricing | None) -> dict[str, Any]:
    """Plain data: tokens per role and spec, their cost where priced, the total."""
    rows = [
        {
            "role": u.role,
            "spec": u.spec,
            "calls": u.calls,
            "input_tokens": u.input_tokens,
            "output_tokens": u.output_tokens,
            "answer_tokens": u.output_tokens - u.reasoning_tokens,
            "reasoning_tokens": u.reasoning_tokens,
            "usd": u.cost(pricing),
            "reasoning_usd": u.reasoning_cost(pricing),
        }
        for u in sorted(usage.by_role.values(), key=lambda u: (ROLES.index(u.role), u.spec))
    ]
    reasoning = sum(u.reasoning_tokens for u in usage.by_role.values())
    return {
        "pricing": str(pricing.path) if pricing else None,
        "by_role": rows,
        "input_tokens": sum(u.input_tokens for u in usage.by_role.values()),
        "output_tokens": sum(u.output_tokens for u in usage.by_role.values()),
        "answer_tokens": sum(u.output_tokens for u in usage.by_role.values()) - reasoning,
        "reasoning_tokens": reasoning,
        "usd": usage.cost(pricing) if pricing else None,
        "reasoning_usd": (
            None
            if not pricing or any(u.reasoning_cost(pricing) is None for u in usage.by_role.values())
            else usage.known_reasoning_cost(pricing)
        ),
        "unpriced": pricing.missing(u.spec for u in usage.by_role.values()) if pricing else [],
    }


# --------------------------------------------------------------------------- the cap


class CostCap:
    """``--max-cost``: a dialogue starts only if what the run spent, plus what its dialogues in flight are expected to
    spend, plus its own expected cost, stays within the cap.

    The expected cost of a dialogue is the mean of what the run's finished dialogues cost, or before any has
    finished ``estimate`` (the ``--estimate`` model's cost of one dialogue); so the cap is passed by at most the
    estimate's error on the dialogues in flight, not by everything they spend. Before any dialogue of the run has
    finished, one may always start alone while the cap is not reached: ``--estimate`` without stored calls is an
    upper bound (every call writing its ``max_tokens``), and it would otherwise hold back every dialogue of a run
    whose cap is below it. Both methods run on the store's own thread (graph.running.playing.StoreWriter), one at a
    time.
    """

    def __init__(
        self, cap: float, pricing: Pricing, run_id: str, models: Mapping[str, str], *, estimate: float | None = None
    ) -> None:
        self.cap = cap
        self.pricing = pricing
        self.run_id = run_id
        self.models = dict(models)
        self.prior = estimate
        self._costs: dict[str, float] | None = None
        self._reasoning: dict[str, float] = {}  # of each dialogue's cost, its models' reasoning
        self._finished: dict[str, float] = {}
        self._reserved: dict[str, float] = {}

    def spent(self) -> float:
        return sum((self._costs or {}).values())

    def spent_on_reasoning(self) -> float:
        """Of :meth:`spent`, what the models' reasoning cost."""
        return sum(self._reasoning.values())

    def reserved(self) -> float:
        """What the dialogues in flight are still expected to spend."""
        return sum(self._reserved.values())

    def estimate(self) -> float:
        """The expected cost of one dialogue: what finished ones cost on average, else the prior estimate, else 0."""
        if self._finished:
            return sum(self._finished.values()) / len(self._finished)
        return self.prior or 0.0

    def _load(self, store: StoreQueries) -> dict[str, float]:
        if self._costs is None:
            usage = usage_by_thread(store, self.run_id)
            self._costs = {t: u.known_cost(self.pricing) for t, u in usage.items()}
            self._reasoning = {t: u.known_reasoning_cost(self.pricing) for t, u in usage.items()}
            finished = {d["thread_id"] for d in store.dialogues(self.run_id) if d["status"] == "finished"}
            self._finished = {t: c for t, c in self._costs.items() if t in finished}
        return self._costs

    def allows(self, store: StoreQueries, thread_id: str | None = None) -> bool | None:
        """May the dialogue ``thread_id`` start (or go on from where it stopped)? True: yes, its expected cost is now
        reserved; None: not before a dialogue in flight ends (its room, and the estimate, may then change); False:
        no."""
        costs = self._load(store)
        need = max(0.0, self.estimate() - costs.get(thread_id, 0.0)) if thread_id else self.estimate()
        verdict = cap_verdict(
            self.cap,
            spent=self.spent(),
            reserved=self.reserved(),
            need=need,
            learning=not self._finished and not self._reserved,
        )
        if verdict and thread_id is not None:
            self._reserved[thread_id] = need
        return verdict

    def ended(self, store: StoreQueries, thread_id: str) -> None:
        costs = self._load(store)
        usage = thread_usage(store, thread_id, self.models)
        costs[thread_id] = usage.known_cost(self.pricing)
        self._reasoning[thread_id] = usage.known_reasoning_cost(self.pricing)
        self._reserved.pop(thread_id, None)
        dialogue = store.get_dialogue(thread_id)
        if dialogue is not None and dialogue.get("status") == "finished":
            self._finished[thread_id] = costs[thread_id]

    def as_dict(self, held: int) -> dict[str, Any]:
        """The summary's ``budget`` entry: the cap, what was spent and is still reserved, in USD; dialogues held
        back."""
        return {
            "max_usd": self.cap,
            "spent_usd": self.spent(),
            "spent_on_reasoning_usd": self.spent_on_reasoning(),
            "reserved_usd": self.reserved(),
            "estimate_usd": self.estimate(),
            "held": held,
        }


# --------------------------------------------------------------------------- estimates


@dataclass(frozen=True)
class RolePlan:
    """One role of a planned run: its spec, how many calls and the most tokens it may write per call."""

    role: str
    spec: str
    calls_per_turn: float  # dialogues × this = calls at each turn
    dialogues: int
    max_tokens: int


@dataclass(frozen=True)
class RoleEstimate:
    role: str
    spec: str
    calls: int
    input_tokens: int
    output_tokens: int
    usd: float | None
    source: str  # "stored" (means of stored calls of this spec and role) or "default" (assumptions)


def stored_means(db: DbLocation | str, pairs: Iterable[tuple[str, str]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Mean input tokens by turn and mean output tokens per call of each (role, spec) in a store, read-only.

    ``db`` is a SQLite file or a PostgreSQL URL; a store that does not exist yet or cannot be read has no means.
    """
    wanted = set(pairs)
    try:
        location = db if isinstance(db, PostgresURL) else parse_db(db)
    except StoreError:
        return {}
    if not isinstance(location, PostgresURL) and not location.is_file():
        return {}
    try:
        with open_reader(location) as reader:
            rows = reader.token_rows()
    except (StoreError, sqlite3.Error):
        return {}
    sums: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows:
        idx, tokens_text, user_model, target_model, judge_model, dialogue_target = (
            row["idx"],
            row["tokens"],
            row["user_model"],
            row["target_model"],
            row["judge_model"],
            row["dialogue_target"],
        )
        tokens = json.loads(tokens_text or "{}")
        for role, spec in (("user", user_model), ("target", target_model or dialogue_target), ("judge", judge_model)):
            if (role, spec) not in wanted or f"{role}_input_tokens" not in tokens:
                continue
            entry = sums.setdefault((role, spec), {"in_by_turn": {}, "out": [0, 0]})
            total, n = entry["in_by_turn"].get(idx, (0, 0))
            entry["in_by_turn"][idx] = (total + tokens.get(f"{role}_input_tokens", 0), n + 1)
            entry["out"][0] += tokens.get(f"{role}_output_tokens", 0)
            entry["out"][1] += 1
    return {
        key: {"input_by_turn": {t: s / n for t, (s, n) in e["in_by_turn"].items()}, "output": e["out"][0] / e["out"][1]}
        for key, e in sums.items()
    }


def _default_input(turn: int, growth: float) -> float:
    return BASE_PROMPT_TOKENS + (turn - 1) * growth


def role_estimates(
    plans: Sequence[RolePlan], *, turns: int, pricing: Pricing | None, stored: Mapping[tuple[str, str], dict[str, Any]]
) -> list[RoleEstimate]:
    """Expected calls, tokens and cost per role and spec for ``turns`` turns.

    Without stored calls, a role writes its ``max_tokens`` every call (an upper bound) and its
    prompt grows by every earlier user message and reply. With stored calls of the same spec in
    the same role, their mean output and their mean input at each turn are used (the last turn
    seen, grown linearly, for later turns).
    """
    # Each earlier turn adds a user message and a reply to the prompt (at most their max tokens).
    growth = max((p.max_tokens for p in plans if p.role == "user"), default=60) + max(
        (p.max_tokens for p in plans if p.role == "target"), default=250
    )
    out = []
    for p in plans:
        calls = round(p.dialogues * p.calls_per_turn * turns)
        means = stored.get((p.role, p.spec))
        if means:
            by_turn = means["input_by_turn"]
            last = max(by_turn)
            slope = (by_turn[last] - by_turn[min(by_turn)]) / (last - min(by_turn)) if last > min(by_turn) else 0.0
            per_turn_in = [by_turn.get(t, by_turn[last] + slope * (t - last)) for t in range(1, turns + 1)]
            output_per_call = means["output"]
            source = "stored"
        else:
            per_turn_in = [_default_input(t, growth) for t in range(1, turns + 1)]
            output_per_call = p.max_tokens
            source = "default"
        per_dialogue = p.calls_per_turn * p.dialogues
        input_tokens = round(sum(per_turn_in) * per_dialogue)
        output_tokens = round(output_per_call * calls)
        price = pricing.get(p.spec) if pricing else None
        out.append(
            RoleEstimate(
                p.role,
                p.spec,
                calls,
                input_tokens,
                output_tokens,
                None if price is None else price.of(input_tokens, output_tokens),
                source,
            )
        )
    return out


# --------------------------------------------------------------------------- the cap across workers


def budget_record(
    cap: float, pricing: Pricing, specs: Iterable[str], *, estimate: float | None = None
) -> dict[str, Any]:
    """``--max-cost`` for an enqueued run, as plain data in each job: the cap, the prices of the run's specs and the
    expected cost of one dialogue (``--estimate``'s, until finished dialogues tell better)."""
    return {
        "max_usd": cap,
        "prices": {s: [pricing.prices[s].input, pricing.prices[s].output] for s in sorted(set(specs))},
        **({"estimate_usd": estimate} if estimate is not None else {}),
    }


def budget_status(
    store: StoreQueries, run_id: str, budget: Mapping[str, Any], *, thread_id: str | None = None
) -> dict[str, Any]:
    """An enqueued run's cap as every worker sees it in the store: spent, reserved by the dialogues in flight (each
    expected to cost what finished ones cost on average, else the budget's estimate, less what it spent so far), the
    cap, and what a new dialogue (``thread_id``, if it spent some already: less) is expected to need; ``learning``:
    no dialogue finished or in flight yet, so one may start alone (see :class:`CostCap`)."""
    pricing = Pricing(path=Path("<enqueued run>"), prices={s: Price(*p) for s, p in budget["prices"].items()})
    costs = {t: u.known_cost(pricing) for t, u in usage_by_thread(store, run_id).items()}
    dialogues = store.dialogues(run_id)
    finished = [costs.get(d["thread_id"], 0.0) for d in dialogues if d["status"] == "finished"]
    estimate = sum(finished) / len(finished) if finished else float(budget.get("estimate_usd") or 0.0)
    in_flight = [d["thread_id"] for d in dialogues if d["status"] == "running" and d["thread_id"] != thread_id]
    return {
        "max_usd": float(budget["max_usd"]),
        "spent_usd": sum(costs.values()),
        "learning": not finished and not in_flight,
        "reserved_usd": sum(max(0.0, estimate - costs.get(t, 0.0)) for t in in_flight),
        "estimate_usd": estimate,
        "need_usd": max(0.0, estimate - costs.get(thread_id, 0.0)) if thread_id else estimate,
    }


def budget_allows(
    store: StoreQueries, run_id: str, budget: Mapping[str, Any], thread_id: str | None = None
) -> bool | None:
    """May another dialogue of the run start? What every worker's dialogues spent and still reserve, plus its own
    expected cost, must stay within the cap (evals.cost.budget_status); :func:`cap_verdict` says True, None or False."""
    status = budget_status(store, run_id, budget, thread_id=thread_id)
    return cap_verdict(
        status["max_usd"],
        spent=status["spent_usd"],
        reserved=status["reserved_usd"],
        need=status["need_usd"],
        learning=status["learning"],
    )


def cap_verdict(cap: float, *, spent: float, reserved: float, need: float, learning: bool) -> bool | None:
    """True: a dialogue expected to cost ``need`` fits under ``cap`` beside what was ``spent`` and is ``reserved`` in
    flight (or, ``learning``, no dialogue's cost is known yet and none is in flight: it plays alone); None: not now,
    but the dialogues in flight may leave room when they end; False: no room (the cap is reached)."""
    if spent >= cap:
        return False
    if learning or spent + reserved + need <= cap:
        return True
    return None if reserved > 0 else False
