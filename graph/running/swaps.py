"""A counterfactual swap (``--swap women=men``): parsing it, and replacing whole words with their case kept."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence


def parse_swap(text: str) -> tuple[str, str]:
    """``OLD=NEW`` → (old, new), both non-empty and different."""
    old, sep, new = text.partition("=")
    old, new = old.strip(), new.strip()
    if not sep or not old or not new:
        raise ValueError(f"swap={text!r} is not OLD=NEW (for example swap='women=men')")
    if old.lower() == new.lower():
        raise ValueError(f"swap={text!r} swaps a word for itself: give two different terms")
    return old, new


def check_swaps(swaps: Sequence[tuple[str, str]]) -> None:
    """Each term is swapped once: ``--swap women=men --swap women=boys`` is ambiguous."""
    seen: set[str] = set()
    for old, _ in swaps:
        if old.lower() in seen:
            raise ValueError(f"--swap {old!r} is given twice: keep one")
        seen.add(old.lower())


def _swap_pattern(terms: Iterable[str]) -> re.Pattern[str]:
    alternatives = sorted({t for t in terms}, key=len, reverse=True)
    return re.compile(r"\b(?:" + "|".join(re.escape(t) for t in alternatives) + r")\b", re.IGNORECASE)


def _keep_case(found: str, new: str) -> str:
    """``new`` written the way ``found`` was: WOMEN → MEN, Women → Men, women → men (as given)."""
    if found.isupper() and len(found) > 1:
        return new.upper()
    if found[:1].isupper():
        return new[:1].upper() + new[1:]
    return new


def swap_terms(text: str, swaps: Sequence[tuple[str, str]]) -> str:
    """Substitute whole words, all swaps at once (so ``women=men men=women`` exchanges them), case kept."""
    if not swaps:
        return text
    table = {old.lower(): new for old, new in swaps}
    return _swap_pattern(table).sub(lambda m: _keep_case(m.group(0), table[m.group(0).lower()]), text)


def mentions(text: str, terms: Iterable[str]) -> bool:
    """Whether ``text`` holds any of ``terms`` as a whole word (any case)."""
    terms = list(terms)
    return bool(terms) and _swap_pattern(terms).search(text) is not None


# --------------------------------------------------------------------------- fork points
