"""Writing a report folder: report.md, the plots and data files, staged first so a failure leaves the folder as it
was."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from evals.report.data import ReportData
from evals.report.exports import (
    DATA_FILES,
    DIALOGUE_COLUMNS,
    HTML_FILE,
    PLOTS,
    TURN_COLUMNS,
    dialogue_records,
    to_csv,
    to_jsonl,
    turn_records,
)
from evals.report.markdown import render_markdown
from evals.report.plots import plot_by_turn, plot_categories


def write_report(
    report: ReportData,
    out: Path,
    *,
    db: Path | str,
    generated_at: str | None = None,
    html: Callable[[str], bytes] | None = None,
) -> list[Path]:
    """Write every file into a staging folder first, then move them into ``out``: a failure leaves ``out`` as it was.

    ``html``, given the generation time, renders ``report.html`` (``--html``) as the file's bytes.
    """
    generated_at = generated_at or datetime.now(UTC).isoformat(timespec="seconds")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        writers: dict[str, Callable[[Path], Any]] = {
            "report.md": lambda p: p.write_text(
                render_markdown(report, db=db, generated_at=generated_at), encoding="utf-8"
            ),
            PLOTS["cumulative"]: lambda p: plot_by_turn(
                report.series,
                p,
                cumulative=True,
                title="Cumulative bias by turn (95% CI)",
                corrected=report.judge_corrected,
            ),
            PLOTS["per_turn"]: lambda p: plot_by_turn(
                report.series, p, cumulative=False, title="Per-turn bias (95% CI)", corrected=report.judge_corrected
            ),
            PLOTS["categories"]: lambda p: plot_categories(
                report.categories, p, title="Bias by the last turn, by category (95% CI)"
            ),
            "turns.csv": lambda p: p.write_text(to_csv(turn_records(report.dataset), TURN_COLUMNS), encoding="utf-8"),
            "dialogues.csv": lambda p: p.write_text(
                to_csv(dialogue_records(report.dataset), DIALOGUE_COLUMNS), encoding="utf-8"
            ),
            "turns.jsonl": lambda p: p.write_text(to_jsonl(turn_records(report.dataset)), encoding="utf-8"),
        }
        if html is not None:
            writers[HTML_FILE] = lambda p: p.write_bytes(html(generated_at))
        for name, write in writers.items():
            write(staging / name)
            if name in DATA_FILES or name == HTML_FILE:
                (staging / name).chmod(0o600)  # generated text: owner-only, like the database
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for name in writers:
            (staging / name).replace(out / name)
            written.append(out / name)
        return written
    finally:
        shutil.rmtree(staging, ignore_errors=True)
