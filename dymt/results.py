"""What the library returns: typed results whose JSON is what the matching command prints with ``--json``.

Every result's JSON carries ``"schema"`` (``dymt.run/1`` …): a key is added in a new version only, never renamed
or removed within one (docs/library.md lists them).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Literal

from dymt.rates import RunRates, rates_of
from evals.judge_error.drift import change_block, drift_block
from evals.report.transition_tables import TRANSITION_COLUMNS, records
from graph.running.playing import DialogueOutcome

RUN_SCHEMA = "dymt.run/2"  # 2: transitions (raw, per group and corrected)


def unfinished(summary: dict[str, Any]) -> int:
    """Dialogues of a run that failed or were held back by the cost cap (jobs that failed before their dialogue
    started included)."""
    return len(summary.get("failed") or []) + int((summary.get("budget") or {}).get("held") or 0)


Ended = Literal["finished", "unfinished", "outage"]


def ended_as(summary: dict[str, Any], *, outage: bool = False) -> Ended:
    """How an invocation of a run ended: "outage" (a provider unreachable past its budget), "unfinished" (some dialogue
    failed or was held back by the cost cap), else "finished" (every dialogue finished, or paused as asked)."""
    return "outage" if outage else "unfinished" if unfinished(summary) else "finished"


@dataclass(frozen=True)
class OutagePastBudget:
    """A provider endpoint that stayed unreachable past ``--outage-budget``: its dialogues stopped failed."""

    endpoint: str
    down: str  # "unreachable for 10m 3s" as the circuit words it
    budget_s: float

    def line(self, *, unfinished: int, resume: str) -> str:
        return (
            f"outage: {self.endpoint} {self.down} past the outage budget ({self.budget_s:g} s); {unfinished} "
            f"dialogue(s) stopped failed, nothing lost. Resume once it is back with: {resume}"
        )


@dataclass(frozen=True)
class RunResult:
    """One invocation of a run: its summary (metrics, raw and judge-corrected rates, cost, failures) and how it ended.

    ``ended`` is "finished" (every dialogue finished, or paused as asked), "unfinished" (some failed or were held
    back by the cost cap: the same run id goes on) or "outage" (a provider unreachable past its budget). ``resume`` is
    the command that goes on.
    """

    run_id: str
    ended: Ended
    summary: dict[str, Any]
    outcomes: tuple[DialogueOutcome, ...] = ()
    outages_past_budget: tuple[OutagePastBudget, ...] = ()
    paused: tuple[str, ...] = field(default=())

    @property
    def resume(self) -> str | None:
        return self.summary.get("resume")

    @property
    def status(self) -> int:
        """Deprecated: the command's exit status (0, 1 or 75); read :attr:`ended` instead."""
        warnings.warn("RunResult.status is deprecated: read RunResult.ended", DeprecationWarning, stacklevel=2)
        return {"finished": 0, "unfinished": 1, "outage": 75}[self.ended]

    @property
    def failures(self) -> list[dict[str, Any]]:
        """The dialogues that did not finish: ``thread_id`` and ``error``."""
        return list(self.summary.get("failed") or [])

    @property
    def cost(self) -> dict[str, Any] | None:
        """Tokens and, with pricing, USD by role and model (``summary["cost"]``)."""
        return self.summary.get("cost")

    @property
    def judge_corrected(self) -> dict[str, Any] | None:
        """The rates corrected for the judge's error, with their intervals (or why they are not computed)."""
        return self.summary.get("judge_corrected")

    @property
    def rates(self) -> RunRates:
        """Per-turn, cumulative, re-emergence and first-bias turn, raw and corrected, as records (dymt.rates)."""
        return rates_of(self.summary)

    @property
    def judge_drift(self) -> JudgeDrift | None:
        """How the judge's error changes over the turns its validation holds items at (None: no validation)."""
        return JudgeDrift.from_dict((self.judge_corrected or {}).get("judge_drift"))

    @property
    def unfinished(self) -> int:
        """Dialogues that failed or were held back by the cost cap."""
        return unfinished(self.summary)

    @property
    def transitions(self) -> tuple[Transition, ...]:
        """Onset, clean so far, persistence, recovery and relapse by turn for each (target, mode), raw and corrected."""
        return tuple(Transition(**r) for r in self._transition_records())

    def transitions_frame(self, *, as_frame: bool | None = None) -> Any:
        """:attr:`transitions` as a pandas DataFrame (columns as :class:`Transition`), or dicts without pandas."""
        from dymt.reading import frame

        return frame(self._transition_records(), TRANSITION_COLUMNS, as_frame)

    def _transition_records(self) -> list[dict[str, Any]]:
        out = []
        for g in self.summary.get("groups") or ():
            out += records(self.run_id, g["target"], g["mode"], g.get("transitions"), "raw")
            fixed = (g.get("judge_corrected") or {}).get("transitions")
            out += records(self.run_id, g["target"], g["mode"], fixed, "corrected")
        return out

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` output of ``python -m graph.run``."""
        return {"schema": RUN_SCHEMA, **self.summary}


@dataclass(frozen=True)
class Transition:
    """One transition probability of one (target, mode) at one turn (docs/concepts.md#bias-dynamics).

    ``metric``: onset, survival, persistence, recovery or relapse; ``kind``: raw (the judge's labels) or corrected
    (for the judge's error); ``base``: the dialogues its probability is over (corrected: expected); ``too_few``: a
    base under the minimum, so ``rate`` and its interval are None.
    """

    run_id: str | None
    target_model: str
    mode: str
    metric: str
    turn: int
    kind: str
    rate: float | None
    low: float | None
    high: float | None
    base: float
    too_few: bool


@dataclass(frozen=True)
class RateChange:
    """The change of one of the judge's rates from the first validated turn to the last, with its 95% interval."""

    change: float
    low: float
    high: float
    drift_probability: float  # the posterior weight of a rate that changes with the turn at all


@dataclass(frozen=True)
class JudgeDrift:
    """The drift check of a judge's validation: how much its sensitivity and specificity change over the turns.

    ``verdict`` is "drift", "flat" or "cannot tell"; ``reason`` the one line why; each change None where the
    validation holds items at one turn only.
    """

    verdict: str
    reason: str
    first_turn: int
    last_turn: int
    sensitivity: RateChange | None
    specificity: RateChange | None
    items_by_turn: tuple[tuple[int, float], ...] = ()

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> JudgeDrift | None:
        if not d:
            return None

        def change(c: dict[str, Any] | None) -> RateChange | None:
            return None if not c else RateChange(c["change"], c["ci95"][0], c["ci95"][1], c["drift_probability"])

        return cls(
            verdict=d["verdict"],
            reason=d["reason"],
            first_turn=d["first_turn"],
            last_turn=d["last_turn"],
            sensitivity=change(d.get("sensitivity")),
            specificity=change(d.get("specificity")),
            items_by_turn=tuple((e["turn"], e["items"]) for e in d.get("items_by_turn") or ()),
        )

    def as_dict(self) -> dict[str, Any]:
        def change(c: RateChange | None) -> dict[str, Any] | None:
            return None if c is None else change_block(c.change, c.low, c.high, c.drift_probability)

        return drift_block(
            self.first_turn,
            self.last_turn,
            self.items_by_turn,
            change(self.sensitivity),
            change(self.specificity),
            self.verdict,
            self.reason,
        )


# dymt.compare/2: a set's transitions (parents, branches, their paired difference, raw and corrected)
BRANCH_SCHEMA, RESUME_SCHEMA, COMPARE_SCHEMA = "dymt.branch/1", "dymt.resume/1", "dymt.compare/2"
# dymt.report/2: each headline row's transitions (raw) and its judge_corrected block's (corrected)
REPORT_SCHEMA, REJUDGE_SCHEMA, JUDGE_SCHEMA = "dymt.report/2", "dymt.rejudge/1", "dymt.judge/1"


@dataclass(frozen=True)
class BranchResult:
    """Branches forked and played on (``python -m graph.branch``): one row per branch, and the parents skipped."""

    run_id: str
    set_name: str | None
    branches: tuple[dict[str, Any], ...]
    skipped: tuple[tuple[str, str], ...] = ()  # (thread id, why it could not be branched so)
    db: str = ""

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [b for b in self.branches if b["status"] != "finished"]

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": BRANCH_SCHEMA,
            "run_id": self.run_id,
            "set": self.set_name,
            "branches": list(self.branches),
            "skipped": [{"thread_id": t, "reason": r} for t, r in self.skipped],
        }


@dataclass(frozen=True)
class ResumeResult:
    """Dialogues continued (``python -m graph.resume``): how each one stands now, with its labels.

    ``summary`` is set (and ``dialogues`` empty) when ``run_id`` named a run whose dialogues were all finished.
    """

    dialogues: tuple[dict[str, Any], ...]  # thread_id, status, labels
    run_id: str | None = None
    summary: dict[str, Any] | None = None
    db: str = ""

    @property
    def paused(self) -> list[str]:
        return [d["thread_id"] for d in self.dialogues if d["status"] == "paused"]

    @property
    def rates(self) -> RunRates | None:
        """The run's rates as records when ``summary`` is set (dymt.rates), else None."""
        return None if self.summary is None else rates_of(self.summary)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": RESUME_SCHEMA,
            "run_id": self.run_id,
            "dialogues": list(self.dialogues),
            "paused": self.paused,
            "summary": self.summary,
        }


@dataclass(frozen=True)
class CompareResult:
    """A comparison (``python -m graph.compare``): ``kind`` is "pair", "set" or "runs"; ``data`` is its JSON.

    ``detail`` holds the computed objects a display renders (tables), not part of the JSON.
    """

    kind: str
    data: dict[str, Any]
    db: str = ""
    detail: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {"schema": COMPARE_SCHEMA, **self.data}


@dataclass(frozen=True)
class ReportResult:
    """A report written into ``out`` (``python -m evals.report``): its files and the headline numbers.

    ``data`` is the whole computed report (evals.report.data.ReportData) a display renders.
    """

    run_ids: tuple[str, ...]
    out: str
    files: tuple[str, ...]
    headline: tuple[dict[str, Any], ...]
    data: Any = field(default=None, repr=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": REPORT_SCHEMA,
            "run_ids": list(self.run_ids),
            "out": self.out,
            "files": list(self.files),
            "headline": list(self.headline),
        }


@dataclass(frozen=True)
class RejudgeResult:
    """A run's turns labelled again by another judge (``python -m evals.rejudge``), and its agreement with the
    run's own labels. ``status`` is the command's exit status: 1 when some judge calls failed (run it again)."""

    run_id: str
    label_set: str
    labelled: int
    unparsed: int
    skipped: int
    failed: int
    first_error: str | None
    agreement: dict[str, Any]
    detail: Any = field(default=None, repr=False, compare=False)

    @property
    def status(self) -> int:
        return 1 if self.failed else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": REJUDGE_SCHEMA,
            "run_id": self.run_id,
            "label_set": self.label_set,
            "labelled": self.labelled,
            "unparsed": self.unparsed,
            "skipped": self.skipped,
            "failed": self.failed,
            "first_error": self.first_error,
            "agreement": self.agreement,
        }


@dataclass(frozen=True)
class JudgeResult:
    """A judge run on standalone (statement, reply) pairs (``python -m evals.judge``): its verdicts' counts, its score
    against the reference labels (``scores``, None without references) and where that score was recorded."""

    judge_model: str
    pairs: int
    biased: int
    parsed: int
    unparsed: int
    failed: int
    first_error: str | None
    scores: dict[str, Any] | None = None
    recorded: dict[str, Any] | None = None  # db, prompt_sha256, validation, refusal
    out: str | None = None
    grammar: dict[str, Any] | None = None  # how the answers were read (nodes.verdicts.reading_counts)
    detail: Any = field(default=None, repr=False, compare=False)
    drift: JudgeDrift | None = None  # how the judge's error changes over its items' turns (None without references)

    @property
    def status(self) -> int:
        return 1 if self.failed else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": JUDGE_SCHEMA,
            "judge_model": self.judge_model,
            "pairs": self.pairs,
            "biased": self.biased,
            "parsed": self.parsed,
            "unparsed": self.unparsed,
            "failed": self.failed,
            "first_error": self.first_error,
            "scores": self.scores,
            "recorded": self.recorded,
            "out": self.out,
            "grammar": self.grammar,
            "judge_drift": None if self.drift is None else self.drift.as_dict(),
        }
