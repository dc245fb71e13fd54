"""DyMT-ESB as a library: typed configuration in, typed results and events out.

    import dymt
    result = dymt.run(mode=["implicit"], turns=5, db="runs.db")
    result.summary["cumulative"], result.judge_corrected, result.ended

Likewise ``dymt.branch``, ``dymt.resume``, ``dymt.report``, ``dymt.rejudge``, ``dymt.validate_judge``,
``dymt.compare``, ``dymt.classify_refusals``, ``dymt.score_coherence``, ``dymt.simulate_filter`` and, for people's
labels, ``dymt.export_annotations``, ``dymt.annotation_agreement``, ``dymt.validate_annotations`` and
``dymt.plan_annotations``;
``dymt.open(db)`` reads stored runs (runs, dialogues, turns, rates, traces, chat records).
Every command (``python -m graph.run``, ``dymt run`` …) parses its flags into the same call and renders the result;
its ``--json`` output is the result's JSON (docs/library.md). Functions never print: what a run says while it plays
goes to ``on_event`` (dymt.events). Bad input raises :class:`DymtError` (one line; nothing written).
"""

from __future__ import annotations

from pathlib import Path

from dymt import events
from dymt.annotating import (
    AgreementResult,
    AnnotatorProgress,
    ExportResult,
    Note,
    PlanResult,
    Stratum,
    ValidationResult,
    annotation_agreement,
    export_annotations,
    plan_annotations,
    validate_annotations,
)
from dymt.branching import branch
from dymt.comparing import compare
from dymt.errors import DymtError, RunStopped
from dymt.judging import Labelled, rejudge, validate_judge
from dymt.preparing import Prepared, prepare
from dymt.queueing import enqueue
from dymt.rates import Rate, Rates, RunRates
from dymt.reading import Store, open  # noqa: A004 - dymt.open(db), the library's reader
from dymt.reporting import report
from dymt.results import (
    BRANCH_SCHEMA,
    COMPARE_SCHEMA,
    JUDGE_SCHEMA,
    REJUDGE_SCHEMA,
    REPORT_SCHEMA,
    RESUME_SCHEMA,
    RUN_SCHEMA,
    BranchResult,
    CompareResult,
    JudgeDrift,
    JudgeResult,
    OutagePastBudget,
    RateChange,
    RejudgeResult,
    ReportResult,
    ResumeResult,
    RunResult,
    Transition,
)
from dymt.resuming import resume
from dymt.running import arun, astream, check, run
from dymt.scoring import FilterResult, ScoringResult, classify_refusals, score_coherence, simulate_filter
from dymt.session import Invocation
from graph.config.run_config import RunConfig

__all__ = [
    "DymtError",
    "Invocation",
    "OutagePastBudget",
    "Prepared",
    "RUN_SCHEMA",
    "Rate",
    "Rates",
    "RunConfig",
    "RunRates",
    "RunResult",
    "RunStopped",
    "arun",
    "astream",
    "check",
    "enqueue",
    "estimate",
    "events",
    "prepare",
    "run",
    "BRANCH_SCHEMA",
    "COMPARE_SCHEMA",
    "JUDGE_SCHEMA",
    "REJUDGE_SCHEMA",
    "REPORT_SCHEMA",
    "RESUME_SCHEMA",
    "BranchResult",
    "CompareResult",
    "JudgeDrift",
    "JudgeResult",
    "RateChange",
    "RejudgeResult",
    "ReportResult",
    "ResumeResult",
    "Store",
    "Transition",
    "Labelled",
    "branch",
    "compare",
    "open",
    "rejudge",
    "report",
    "resume",
    "validate_judge",
    "FilterResult",
    "ScoringResult",
    "classify_refusals",
    "score_coherence",
    "simulate_filter",
    "AgreementResult",
    "AnnotatorProgress",
    "ExportResult",
    "Note",
    "PlanResult",
    "Stratum",
    "ValidationResult",
    "annotation_agreement",
    "export_annotations",
    "plan_annotations",
    "validate_annotations",
]


def estimate(config: RunConfig | str | Path | None = None, /, **options) -> dict:
    """The expected model calls, tokens and cost of a run, without running it (nothing written, no key needed)."""
    return Invocation(config, **options).estimate()
