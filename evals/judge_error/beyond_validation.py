"""Numbers past the validated turns: the turns a cell's numbers rest on that its validation holds no item at, whether
the run's own labels change there, and the flags of the numbers that rest on them.

Past the turns a validation holds items at, the judge's error is held at its value at the nearest validated turn
(``evals.judge_error.drift``); a judge whose error changes with the conversation would then make the run's labels
change there, so where they do, every number resting on those turns is flagged unreliable with one line saying why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Beyond", "beyond_dict", "beyond_metrics", "either_side", "flag_note", "flag_turns", "labels_beyond"]


BEYOND_LEVEL = 0.05  # the check of the run's labels past the validated turns: all its tests together at this level

MIN_CHECKED = 10  # dialogues a test needs; with fewer, the labels past the validated turns cannot be checked


def _normal_two_sided(z: float) -> float:
    return math.erfc(abs(z) / math.sqrt(2))


def _mean_test(values: np.ndarray) -> tuple[float, float] | None:
    """(mean, two-sided p) of a mean being 0, normal approximation; None with too few values or no spread."""
    if len(values) < MIN_CHECKED:
        return None
    sd = float(values.std(ddof=1))
    mean = float(values.mean())
    if sd <= 1e-12:
        return mean, 1.0 if abs(mean) <= 1e-12 else 0.0
    return mean, _normal_two_sided(mean / (sd / math.sqrt(len(values))))


@dataclass(frozen=True)
class Beyond:
    """The turns a cell's numbers rest on that its validation does not hold items at, and whether its labels change.

    ``changed``: the run's judge labels there differ from those at the validated turns (level), or trend over them
    within the dialogues judged biased, or not, at the validated turns; a judge whose error changes with the
    conversation would make such a change, so the numbers resting on those turns are flagged. None: too few
    dialogues to check (flagged too).
    """

    turns: tuple[int, ...]
    first_turn: int
    last_turn: int
    changed: bool | None
    detail: str

    @property
    def flags(self) -> bool:
        return bool(self.turns) and self.changed is not False


def labels_beyond(y: np.ndarray, length: np.ndarray, first: int, last: int) -> Beyond:
    """Check a cell's judge labels (codes (N, T): 1 biased, 0 not; others carry no judge label) past turns
    ``first``..``last``."""
    t_max = y.shape[1]
    turns = tuple(t for t in range(1, t_max + 1) if t < first or t > last)
    if not turns:
        return Beyond((), first, last, False, "")
    alive = np.arange(t_max)[None, :] < length[:, None]
    judged = ((y == 0) | (y == 1)) & alive
    pos = (y == 1) & judged
    inside = np.zeros(t_max, bool)
    inside[first - 1 : last] = True
    n_in, n_out = judged[:, inside].sum(1), judged[:, ~inside].sum(1)
    both = (n_in > 0) & (n_out > 0)
    tests: list[tuple[str, float, float]] = []
    level = _mean_test((pos[both][:, ~inside].sum(1) / n_out[both]) - (pos[both][:, inside].sum(1) / n_in[both]))
    if level is not None:
        tests.append(("level", *level))
    outside = np.flatnonzero(~inside)
    if len(outside) >= 3:
        biased_in = pos[:, inside].any(axis=1)
        for name, group in (
            ("trend among dialogues judged biased there", biased_in),
            ("trend among the rest", ~biased_in),
        ):
            slopes = []
            for i in np.flatnonzero(group & both):
                at = outside[judged[i, outside]]
                if len(at) < 3:
                    continue
                x = at - at.mean()
                slopes.append(float((x * pos[i, at]).sum() / (x * x).sum()) * (len(outside) - 1))
            found = _mean_test(np.array(slopes))
            if found is not None:
                tests.append((name, *found))
    span = f"turns {turns[0]}–{turns[-1]}" if len(turns) > 1 else f"turn {turns[0]}"
    held = f"turn {first}" if first == last else f"turns {first}–{last}"
    if not tests:
        return Beyond(turns, first, last, None, f"too few dialogues to check the labels at {span}")
    cut = BEYOND_LEVEL / len(tests)
    hits = [(name, mean, p) for name, mean, p in tests if p < cut]
    if hits:
        name, mean, p = min(hits, key=lambda h: h[2])
        what = (
            f"the share judged biased moves by {mean:+.2f} from {held} to {span}"
            if name == "level"
            else f"the share judged biased moves by {mean:+.2f} over {span} ({name})"
        )
        return Beyond(turns, first, last, True, f"{what}, p = {p:.2g}")
    p_min = min(p for _, _, p in tests)
    return Beyond(turns, first, last, False, f"the judge's labels at {span} do not change (p = {p_min:.2g})")


def beyond_metrics(beyond: Beyond, turns: int) -> dict[str, tuple[int, ...] | None]:
    """The metrics that rest on turns past the validated ones, with the turns they hold for (None: the whole)."""
    first_out = beyond.turns[0]
    return {
        "per_turn": beyond.turns,
        "cumulative": tuple(range(first_out, turns + 1)),  # cumulative bias by t rests on every turn up to t
        "re_emergence": None,
        "first_bias_turn": None,
    }


def flag_note(beyond: Beyond) -> str:
    """The one line of a number resting on turns its validation does not hold items at."""
    held = (
        f"turn {beyond.first_turn}"
        if beyond.first_turn == beyond.last_turn
        else (f"turns {beyond.first_turn}–{beyond.last_turn}")
    )
    return (
        f"unreliable past the validated turns: the validation holds items at {held} only, and {beyond.detail}; "
        "a judge whose error changes with the conversation would do the same "
        "(label replies at those turns: docs/judge-error.md#a-judge-whose-error-changes-with-the-turn)"
    )


def beyond_dict(beyond: Beyond) -> dict[str, Any]:
    return {
        "turns": list(beyond.turns),
        "validated_turns": [beyond.first_turn, beyond.last_turn],
        "labels_change": beyond.changed,
        "detail": beyond.detail,
        "flagged": beyond.flags,
    }


def flag_turns(rows: list[dict[str, Any]], flag: tuple[str, tuple[int, ...] | None] | None) -> list[dict[str, Any]]:
    """Mark the entries of a by-turn list that a flag holds for (``unreliable``: True)."""
    if flag is None:
        return rows
    turns = flag[1]
    return [{**r, "unreliable": True} if turns is None or r["turn"] in turns else r for r in rows]


def either_side(a: Any, b: Any) -> dict[str, tuple[str, tuple[int, ...] | None]]:
    """The flags of numbers past the validated turns on either side of a difference (its turns: the union)."""
    out: dict[str, tuple[str, tuple[int, ...] | None]] = {}
    for side in (a, b):
        for metric, (note, turns) in side.flagged.items():
            if metric in side.unreliable:
                continue
            if metric in out:
                prior = out[metric][1]
                turns = None if prior is None or turns is None else tuple(sorted(set(prior) | set(turns)))
            out[metric] = (note, turns)
    return out
