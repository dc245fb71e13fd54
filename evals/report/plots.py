"""PNG plots for reports (matplotlib, Agg backend: no display needed): bias by turn and by category.

Where the report has rates corrected for the judge's error, the by-turn plots draw them too: a dashed
line in the group's colour with a hatched 95% band, beside the raw solid line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evals.report.breakdown import BiasRow
from evals.stats.metrics import Summary

DPI = 120


def _pyplot():
    """matplotlib's pyplot on the Agg backend, imported only when a plot is drawn."""
    try:
        import matplotlib
    except ImportError:
        raise RuntimeError("plots need matplotlib: pip install 'matplotlib>=3.8' (or pip install -e .)") from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def label_of(key: object) -> str:
    return " · ".join(map(str, key)) if isinstance(key, tuple) else str(key)


def _percent(values: Sequence[float | None]) -> list[float]:
    return [float("nan") if v is None else 100 * v for v in values]


def plot_by_turn(
    series: Mapping[Any, Summary],
    path: Path,
    *,
    cumulative: bool,
    title: str,
    corrected: Mapping[Any, dict[str, Any]] | None = None,
) -> Path:
    """One line per group (rate by turn, in %) with its 95% interval as a band; ``corrected`` adds the judge-corrected
    curves."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    try:
        for key, summary in series.items():
            estimates = summary.cumulative_rate if cumulative else summary.per_turn_rate
            turns = list(range(1, len(estimates) + 1))
            (line,) = ax.plot(turns, _percent([e.value for e in estimates]), marker="o", label=label_of(key))
            ax.fill_between(
                turns,
                _percent([e.low for e in estimates]),
                _percent([e.high for e in estimates]),
                color=line.get_color(),
                alpha=0.18,
                linewidth=0,
            )
            rows = ((corrected or {}).get(key) or {}).get("cumulative" if cumulative else "per_turn") or []
            if rows:
                xs = [r["turn"] for r in rows]
                ax.plot(
                    xs,
                    _percent([r["rate"] for r in rows]),
                    linestyle="--",
                    marker="s",
                    markersize=4,
                    color=line.get_color(),
                    label=f"{label_of(key)} (corrected for judge error)",
                )
                ax.fill_between(
                    xs,
                    _percent([r["ci95"][0] for r in rows]),
                    _percent([r["ci95"][1] for r in rows]),
                    facecolor="none",
                    edgecolor=line.get_color(),
                    hatch="//",
                    alpha=0.35,
                    linewidth=0,
                )
        ax.set_xlabel("turn")
        ax.set_ylabel("dialogues with ≥1 biased reply (%)" if cumulative else "biased replies (%)")
        ax.set_ylim(-2, 102)
        ax.set_xticks(range(1, max([1, *(s.turns for s in series.values())]) + 1))
        ax.set_title(title)
        ax.grid(alpha=0.3)
        if series:
            ax.legend(fontsize=8, loc="best")
        fig.tight_layout()
        fig.savefig(path, dpi=DPI, format="png")
    finally:
        plt.close(fig)
    return path


def plot_categories(rows: Sequence[BiasRow], path: Path, *, title: str) -> Path:
    """Grouped bars: bias by the last turn per category (key[0]), one bar per model · mode, with 95% intervals."""
    plt = _pyplot()
    categories = sorted({row.key[0] for row in rows})  # type: ignore[index]  # row.key is a tuple
    groups = sorted({tuple(row.key[1:]) for row in rows})  # type: ignore[index]
    by_key = {row.key: row for row in rows}
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(categories) * max(1, len(groups)) ** 0.5 + 2), 4.2))
    try:
        width = 0.8 / max(1, len(groups))
        for g, rest in enumerate(groups):
            xs, heights, err_low, err_high = [], [], [], []
            for c, category in enumerate(categories):
                row = by_key.get((category, *rest))
                if row is None or row.bias_at_end.value is None:
                    continue
                est = row.bias_at_end
                xs.append(c + (g - (len(groups) - 1) / 2) * width)
                heights.append(100 * est.value)  # type: ignore[operator]  # a rate with a value
                err_low.append(100 * (est.value - est.low) if est.low is not None else 0.0)  # type: ignore[operator]
                err_high.append(100 * (est.high - est.value) if est.high is not None else 0.0)  # type: ignore[operator]
            ax.bar(xs, heights, width=width, yerr=[err_low, err_high], capsize=3, label=label_of(rest))
        ax.set_xticks(range(len(categories)))
        ax.set_xticklabels(categories, rotation=20, ha="right")
        ax.set_ylabel("dialogues with ≥1 biased reply (%)")
        ax.set_ylim(0, 102)
        ax.set_title(title)
        ax.grid(axis="y", alpha=0.3)
        if groups:
            ax.legend(fontsize=8, loc="best")
        fig.tight_layout()
        fig.savefig(path, dpi=DPI, format="png")
    finally:
        plt.close(fig)
    return path
