"""Inline SVG charts of the report's own numbers: bias by turn (one panel per mode) and bias by category.

Each target has one colour and one marker shape throughout the page (Okabe–Ito colours, which
colour-blind readers can tell apart; the shape tells them apart again in greyscale). Every point
carries a ``<title>`` with the value exactly as the report's table prints it, so hovering shows it.
Judge-corrected curves, when the report data has them, are drawn dashed with hollow markers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evals.report.breakdown import BiasRow
from evals.report.formatting import estimate_text
from evals.report.html.sections import e
from evals.stats.metrics import Estimate, Summary

COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
SHAPES = ("circle", "square", "triangle", "diamond", "down", "cross")
W, H = 460, 300
LEFT, RIGHT, TOP, BOTTOM = 56, 14, 30, 46


@dataclass(frozen=True)
class Point:
    turn: int
    est: Estimate
    tip: str  # the hover text: the value as the table prints it


def style_of(index: int) -> tuple[str, str]:
    """(colour, shape) of the index-th target: every colour first, then every colour again with the next shape."""
    return COLOURS[index % len(COLOURS)], SHAPES[(index + index // len(COLOURS)) % len(SHAPES)]


def marker(shape: str, x: float, y: float, colour: str, *, filled: bool = True, r: float = 4.2) -> str:
    fill = colour if filled else "#fff"
    common = f'fill="{fill}" stroke="{colour}" stroke-width="1.6"'
    if shape == "square":
        return f'<rect x="{x - r:.1f}" y="{y - r:.1f}" width="{2 * r:.1f}" height="{2 * r:.1f}" {common}/>'
    if shape in ("triangle", "down", "diamond"):
        pts = {
            "triangle": [(x, y - r * 1.2), (x + r * 1.1, y + r * 0.8), (x - r * 1.1, y + r * 0.8)],
            "down": [(x, y + r * 1.2), (x + r * 1.1, y - r * 0.8), (x - r * 1.1, y - r * 0.8)],
            "diamond": [(x, y - r * 1.3), (x + r * 1.1, y), (x, y + r * 1.3), (x - r * 1.1, y)],
        }[shape]
        return f'<polygon points="{" ".join(f"{a:.1f},{b:.1f}" for a, b in pts)}" {common}/>'
    if shape == "cross":
        return (
            "<path "
            f'd="M{x - r:.1f},{y - r:.1f}L{x + r:.1f},{y + r:.1f}M{x - r:.1f},{y + r:.1f}L{x + r:.1f},{y - r:.1f}" '
            f'stroke="{colour}" stroke-width="2.2" fill="none"/>'
        )
    return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r:.1f}" {common}/>'


def swatch(colour: str, shape: str, *, dashed: bool = False, filled: bool = True) -> str:
    dash = ' stroke-dasharray="4 3"' if dashed else ""
    return (
        f'<svg class="swatch" width="30" height="14" viewBox="0 0 30 14" aria-hidden="true">'
        f'<line x1="1" y1="7" x2="29" y2="7" stroke="{colour}" stroke-width="2"{dash}/>'
        f"{marker(shape, 15, 7, colour, filled=filled and not dashed, r=3.6)}</svg>"
    )


def _axes(turns: int, ylabel: str, title: str, title_id: str, heading: str) -> tuple[list[str], Any, Any]:
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def x(t: float) -> float:
        return LEFT + (pw / 2 if turns == 1 else (t - 1) / (turns - 1) * pw)

    def y(v: float) -> float:
        return TOP + (1 - v) * ph

    parts = [
        f'<title id="{e(title_id)}">{e(title)}</title>',
        f'<text class="panel-title" x="{LEFT}" y="14">{e(heading)}</text>',
    ]
    for tick in (0, 0.25, 0.5, 0.75, 1):
        parts.append(
            f'<line class="grid" x1="{LEFT}" x2="{W - RIGHT}" y1="{y(tick):.1f}" y2="{y(tick):.1f}"/>'
            f'<text class="tick" x="{LEFT - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">{int(tick * 100)}%</text>'
        )
    for t in range(1, turns + 1):
        parts.append(f'<text class="tick" x="{x(t):.1f}" y="{H - BOTTOM + 16}" text-anchor="middle">{t}</text>')
    parts.append(
        f'<line class="axis" x1="{LEFT}" x2="{W - RIGHT}" y1="{y(0):.1f}" y2="{y(0):.1f}"/>'
        f'<text class="axis-label" x="{LEFT + pw / 2:.1f}" y="{H - 8}" text-anchor="middle">turn</text>'
        f'<text class="axis-label" transform="translate(14 {TOP + ph / 2:.1f}) rotate(-90)" '
        f'text-anchor="middle">{e(ylabel)}</text>'
    )
    return parts, x, y


def _series(points: Sequence[Point], x, y, colour: str, shape: str, *, dashed: bool, label: str) -> str:
    known = [p for p in points if p.est.value is not None]
    band = [p for p in known if p.est.low is not None and p.est.high is not None]
    parts = []
    if len(band) > 1:
        upper = " ".join(f"{x(p.turn):.1f},{y(p.est.high):.1f}" for p in band)
        lower = " ".join(f"{x(p.turn):.1f},{y(p.est.low):.1f}" for p in reversed(band))
        edge = f' stroke="{colour}" stroke-opacity="0.5" stroke-dasharray="3 3"' if dashed else ""
        parts.append(
            f'<polygon class="band{" dashed" if dashed else ""}" points="{upper} {lower}" fill="{colour}"{edge}/>'
        )
    elif len(band) == 1:
        p = band[0]
        parts.append(
            f'<line class="whisker" x1="{x(p.turn):.1f}" x2="{x(p.turn):.1f}" y1="{y(p.est.low):.1f}" '
            f'y2="{y(p.est.high):.1f}" stroke="{colour}"/>'
        )
    if len(known) > 1:
        line = " ".join(f"{x(p.turn):.1f},{y(p.est.value):.1f}" for p in known)
        dash = ' stroke-dasharray="6 4"' if dashed else ""
        parts.append(f'<polyline class="line" points="{line}" stroke="{colour}"{dash}/>')
    for p in known:
        px, py = x(p.turn), y(p.est.value)
        parts.append(
            f'<g class="pt" tabindex="-1"><title>{e(label)}, turn {p.turn}: {e(p.tip)}</title>'
            f'<circle class="hit" cx="{px:.1f}" cy="{py:.1f}" '
            f'r="10"/>{marker(shape, px, py, colour, filled=not dashed)}</g>'
        )
    return "".join(parts)


def _corrected_points(entry: Mapping[str, Any] | None, kind: str) -> list[Point]:
    """Points of a judge-corrected curve: {turn, rate, ci95} items like the run summary's raw ones."""
    out = []
    for item in (entry or {}).get(kind) or []:
        low, high = (list(item.get("ci95") or []) + [None, None])[:2]
        est = Estimate(item.get("rate"), low, high)
        out.append(Point(int(item["turn"]), est, f"judge-corrected {estimate_text(est)}"))
    return out


def corrected_for(corrected: Mapping[Any, Any] | None, key: tuple[str, str]) -> Mapping[str, Any] | None:
    """The judge-corrected entry of one (target, mode): keyed by the tuple or by "target · mode"."""
    if not corrected:
        return None
    return corrected.get(key) or corrected.get(" · ".join(key))


def targets_of(keys: Sequence[tuple[str, ...]]) -> list[str]:
    return sorted({str(k[0]) for k in keys})


def curve_figure(
    series: Mapping[Any, Summary], *, cumulative: bool, corrected: Mapping[Any, Any] | None = None, figure_id: str
) -> str:
    """One panel per mode, one series per target (with its 95% band), legend buttons that hide or show a target."""
    keys = [k for k in series if isinstance(k, tuple) and len(k) == 2]
    targets = targets_of(keys)
    modes = sorted({str(k[1]) for k in keys})
    turns = max([1, *(s.turns for s in series.values())])
    what = "Cumulative bias by turn" if cumulative else "Per-turn bias"
    ylabel = "dialogues with ≥1 biased reply" if cumulative else "biased replies"
    kind = "cumulative" if cumulative else "per_turn"
    any_corrected = False
    panels = []
    for mode in modes:
        title = f"{what} · mode {mode} (95% intervals)"
        title_id = f"{figure_id}-{mode}-title"
        parts, x, y = _axes(turns, ylabel, title, title_id, f"mode {mode}")
        for i, target in enumerate(targets):
            summary = series.get((target, mode))
            if summary is None:
                continue
            colour, shape = style_of(i)
            if cumulative:
                points = [
                    Point(c.turn, est, f"{estimate_text(est)} ({c.n_biased_dialogues}/{c.n_dialogues})")
                    for c, est in zip(summary.cumulative, summary.cumulative_rate)
                ]
            else:
                points = [
                    Point(p.turn, est, f"{estimate_text(est)} ({p.n_biased}/{p.n_labelled})")
                    for p, est in zip(summary.per_turn, summary.per_turn_rate)
                ]
            parts.append(
                f'<g class="series" data-series="{i}">'
                f"{_series(points, x, y, colour, shape, dashed=False, label=f'{target} · {mode}')}</g>"
            )
            fixed = _corrected_points(corrected_for(corrected, (target, mode)), kind)
            if fixed:
                any_corrected = True
                parts.append(
                    f'<g class="series corrected" data-series="{i}">'
                    + _series(fixed, x, y, colour, shape, dashed=True, label=f"{target} · {mode} (judge-corrected)")
                    + "</g>"
                )
        panels.append(
            f'<svg class="chart" viewBox="0 0 {W} {H}" role="img" '
            f'aria-labelledby="{e(title_id)}">{"".join(parts)}</svg>'
        )
    caption = f"{what} by target and mode, 95% bootstrap intervals as bands; hover a point for its value"
    if any_corrected:
        caption += "; dashed: corrected for the judge's measured error"
    return (
        f'<figure class="chart-figure" id="{e(figure_id)}"><figcaption>{e(caption)}</figcaption>'
        f'{legend(targets, corrected=any_corrected)}<div class="panels">{"".join(panels)}</div></figure>'
    )


def legend(targets: Sequence[str], *, corrected: bool = False, modes: Sequence[str] = ()) -> str:
    keys = []
    for i, target in enumerate(targets):
        colour, shape = style_of(i)
        keys.append(
            f'<button type="button" class="key" aria-pressed="true" data-series="{i}">'
            f"{swatch(colour, shape)}<span>{e(target)}</span></button>"
        )
    if corrected:
        keys.append(
            '<button type="button" class="key" aria-pressed="true" data-kind="corrected">'
            f"{swatch('#475467', 'circle', dashed=True)}<span>judge-corrected</span></button>"
        )
    for j, mode in enumerate(modes):
        keys.append(
            f'<span class="key static">{swatch("#475467", "circle", filled=j % 2 == 0)}<span>mode '
            f"{e(mode)}</span></span>"
        )
    return f'<div class="legend" role="group" aria-label="series: press to hide or show">{"".join(keys)}</div>'


def category_figure(rows: Sequence[BiasRow], *, figure_id: str) -> str:
    """Bias by the last turn per category: a dot with its 95% interval per target · mode (filled: first mode)."""
    keys = [r.key for r in rows if isinstance(r.key, tuple) and len(r.key) == 3]
    categories = sorted({str(k[0]) for k in keys})
    targets = sorted({str(k[1]) for k in keys})
    modes = sorted({str(k[2]) for k in keys})
    by_key = {r.key: r for r in rows}
    groups = [(t, m) for t in targets for m in modes if any(k[1] == t and k[2] == m for k in keys)]
    step, gap, left, right = 13, 14, 150, 16
    row_h = max(1, len(groups)) * step + gap
    height = TOP + len(categories) * row_h + BOTTOM
    pw = W + 200 - left - right

    def x(v: float) -> float:
        return left + v * pw

    title = "Bias by the last turn, by category (95% intervals)"
    title_id = f"{figure_id}-title"
    parts = [f'<title id="{e(title_id)}">{e(title)}</title>']
    for tick in (0, 0.25, 0.5, 0.75, 1):
        parts.append(
            f'<line class="grid" x1="{x(tick):.1f}" x2="{x(tick):.1f}" y1="{TOP}" y2="{height - BOTTOM}"/>'
            f'<text class="tick" x="{x(tick):.1f}" y="{height - BOTTOM + 16}" '
            f'text-anchor="middle">{int(tick * 100)}%</text>'
            f'<text class="tick" x="{x(tick):.1f}" y="{TOP - 8}" text-anchor="middle">{int(tick * 100)}%</text>'
        )
    parts.append(
        f'<text class="axis-label" x="{left + pw / 2:.1f}" y="{height - 8}" text-anchor="middle">'
        "dialogues with ≥1 biased reply by the last turn</text>"
    )
    for c, category in enumerate(categories):
        top = TOP + c * row_h + gap / 2
        parts.append(
            f'<text class="cat" x="{left - 10}" y="{top + row_h / 2 - gap / 2 + 4:.1f}" '
            f'text-anchor="end">{e(category)}</text>'
        )
        if c:
            parts.append(
                f'<line class="sep" x1="{left - 140}" x2="{x(1):.1f}" y1="{top - gap / 2:.1f}" '
                f'y2="{top - gap / 2:.1f}"/>'
            )
        for g, (target, mode) in enumerate(groups):
            row = by_key.get((category, target, mode))
            if row is None or row.bias_at_end.value is None:
                continue
            est, i = row.bias_at_end, targets.index(target)
            colour, shape = style_of(i)
            cy = top + g * step + step / 2
            whisker = ""
            if est.low is not None and est.high is not None:
                whisker = (
                    f'<line class="whisker" x1="{x(est.low):.1f}" x2="{x(est.high):.1f}" y1="{cy:.1f}" y2="{cy:.1f}" '
                    f'stroke="{colour}"/>'
                )
            parts.append(
                f'<g class="series" data-series="{i}"><g class="pt"><title>{e(category)} · {e(target)} · {e(mode)}: '
                f"{e(estimate_text(est))}</title>{whisker}"
                f'<circle class="hit" cx="{x(est.value):.1f}" cy="{cy:.1f}" r="9"/>'  # type: ignore[arg-type]
                f"{marker(shape, x(est.value), cy, colour, filled=modes.index(mode) % 2 == 0, r=3.8)}</g></g>"  # type: ignore[arg-type]
            )
    svg = (
        f'<svg class="chart wide" viewBox="0 0 {W + 200} {height}" role="img" aria-labelledby="{e(title_id)}">'
        f"{''.join(parts)}</svg>"
    )
    return (
        f'<figure class="chart-figure" id="{e(figure_id)}"><figcaption>{e(title)}; hover a point for its value'
        f'</figcaption>{legend(targets, modes=modes if len(modes) > 1 else ())}<div class="panels">{svg}</div></figure>'
    )


DYNAMICS = ("onset", "persistence", "relapse")  # the curves of a dynamics panel (recovery = 1 − persistence)
DYNAMICS_FIGURE = "#bias-dynamics"  # the page's image reference for the figure (no file: drawn inline)


def _transition_points(block: Mapping[str, Any] | None, metric: str, what: str) -> list[Point]:
    from evals.report.transition_tables import rate_text

    out = []
    for item in (block or {}).get(metric) or []:
        low, high = (list(item.get("ci95") or []) + [None, None])[:2]
        out.append(Point(int(item["turn"]), Estimate(item.get("rate"), low, high), f"{what} {rate_text(item)}"))
    return out


def dynamics_figure(
    raw: Mapping[tuple[str, str], Mapping[str, Any]],
    corrected: Mapping[Any, Any] | None = None,
    *,
    figure_id: str = "fig-dynamics",
) -> str:
    """One panel per target · mode: onset hazard, persistence and relapse by turn, each with its 95% band; dashed
    where corrected for the judge's error. A rate whose base is too small is not drawn (its tip in the table says
    so)."""
    from evals.report.transition_tables import NAMES

    turns = max([1, *(e["turn"] for b in raw.values() for m in DYNAMICS for e in b.get(m) or ())])
    any_corrected = False
    panels = []
    for n, ((target, mode), block) in enumerate(raw.items()):
        label = f"{target} · {mode}"
        title = f"Bias dynamics · {label} (95% intervals)"
        title_id = f"{figure_id}-{n}-title"
        parts, x, y = _axes(turns, "probability", title, title_id, label)
        fixed = (corrected_for(corrected, (target, mode)) or {}).get("transitions")
        for i, metric in enumerate(DYNAMICS):
            colour, shape = style_of(i)
            name = NAMES[metric]
            points = _transition_points(block, metric, "raw")
            parts.append(
                f'<g class="series" data-series="{i}">'
                f"{_series(points, x, y, colour, shape, dashed=False, label=f'{label} {name}')}</g>"
            )
            if fixed:
                any_corrected = True
                points = _transition_points(fixed, metric, "judge-corrected")
                parts.append(
                    f'<g class="series corrected" data-series="{i}">'
                    + _series(points, x, y, colour, shape, dashed=True, label=f"{label} {name} (judge-corrected)")
                    + "</g>"
                )
        panels.append(
            f'<svg class="chart" viewBox="0 0 {W} {H}" role="img" '
            f'aria-labelledby="{e(title_id)}">{"".join(parts)}</svg>'
        )
    caption = (
        "Onset hazard, persistence and relapse by turn per target and mode, 95% intervals as bands; a rate over "
        "too few dialogues is left out; hover a point for its value"
    )
    if any_corrected:
        caption += "; dashed: corrected for the judge's measured error"
    names = [NAMES[m] for m in DYNAMICS]
    return (
        f'<figure class="chart-figure" id="{e(figure_id)}"><figcaption>{e(caption)}</figcaption>'
        f'{legend(names, corrected=any_corrected)}<div class="panels">{"".join(panels)}</div></figure>'
    )
