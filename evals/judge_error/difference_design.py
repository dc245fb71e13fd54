"""Labels drawn for a paired difference: one budget over two compared cells, allocated so that their difference narrows
most (``evals.annotate export --design active --compare A B``)."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

from evals.judge_error.active_design import Pick, Stratum, allocation, draw_active, merged, spread
from evals.judge_error.codes import LabelLike
from evals.judge_error.reply_value import valued_strata

__all__ = ["DIFFERENCE_AIMS", "cell_dialogues", "draw_for_difference"]

# The judge's error shared by both sides of a paired difference largely cancels in it (the correction pairs the
# validation draws), so a budget spent on narrowing a difference goes mostly to the compared cells' dialogues.
DIFFERENCE_AIMS = {"dialogues": 0.8, "sensitivity": 0.1, "specificity": 0.1}


def cell_dialogues(strata: Sequence[Stratum]) -> dict[Hashable, int]:
    """Each cell's dialogues with a judged reply, from its strata."""
    seen: dict[Hashable, set[int]] = {}
    for s in strata:
        seen.setdefault(s.cell, set()).update(i for i, _ in s.members)
    return {cell: len(v) for cell, v in seen.items()}


def draw_for_difference(
    strata: Sequence[Stratum],
    budget: int,
    compared: Iterable[Hashable],
    *,
    seed: int = 0,
    exclude: Mapping[Any, Iterable[tuple[int, int]]] | None = None,
    known: Mapping[Any, Mapping[tuple[int, int], LabelLike]] | None = None,
    cells: Mapping[Any, Sequence[Sequence[LabelLike]]] | None = None,
    point: tuple[float, float] | None = None,
) -> list[Pick]:
    """A stratified draw of ``budget`` replies of the ``compared`` cells only, allocated to narrow their paired
    difference.

    A difference B − A of cell rates has the variance of both rates (their dialogue parts are independent,
    the judge's error they share cancels): the strata of both cells (over all turns: :func:`merged`) compete
    for one budget by Neyman allocation on ``DIFFERENCE_AIMS``, each reply weighted by how much it moves its
    own cell's rate (r_h over the cell's dialogues), so the labels go where the difference is uncertain
    rather than an even share to each cell. With ``cells`` (each cell's judge labels) that allocation only
    splits the budget between the compared cells, and each cell's share is drawn by the active design within
    the cell (strata by turn, valued by the fitted chain at ``point``: ``evals.judge_error.reply_value``). Other
    cells get no label; picks keep their known inclusion probabilities.
    """
    wanted = set(compared)
    dialogues = cell_dialogues(strata)
    skip = {cell: set(v) for cell, v in (exclude or {}).items()}
    left = merged([s.keeping(skip.get(s.cell, ())) for s in strata if s.cell in wanted])
    if not any(s.size for s in left):
        raise ValueError(f"no judged reply in the compared cells {sorted(map(str, wanted))}")
    spreads = spread(left, known, aims=DIFFERENCE_AIMS, dialogues=dialogues)
    if cells is None:
        return draw_active(left, budget, seed=seed, spreads=spreads)
    shares: dict[Hashable, int] = {}
    for s, n in zip(left, allocation(left, spreads, budget)):
        shares[s.cell] = shares.get(s.cell, 0) + n
    picks: list[Pick] = []
    for k, cell in enumerate(sorted(shares, key=str)):
        mine = [s.keeping(skip.get(cell, ())) for s in strata if s.cell == cell]
        own = {cell: (known or {}).get(cell) or {}}
        drawn, within = valued_strata(mine, {cell: cells[cell]}, own, shares[cell], point=point)
        picks += draw_active(drawn, shares[cell], seed=seed + k, spreads=within, known=own)
    return picks
