"""A run's spending cap as the player sees it: may another dialogue start, and one has ended.

:class:`evals.cost.CostCap` (``--max-cost``) is one; the player takes anything with its two methods, so the
running layer never imports the evaluation's. Both methods run on the store's own thread, one at a time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from checkpoints.store import Writer
from graph.running.store_writer import StoreWriter

# (store, the dialogue's thread id) -> True: start (its cost is reserved), None: not before another dialogue ends,
# False: no
BudgetCheck = Callable[[Writer, str], "bool | None"]
DialogueEnded = Callable[[Writer, str], None]


class DialogueBudget(Protocol):
    """May another dialogue start (True: yes, its cost is now reserved; None: not before one in flight ends; False: no),
    and a dialogue has ended (what it spent is now known)."""

    def allows(self, store: Writer, thread_id: str) -> bool | None: ...

    def ended(self, store: Writer, thread_id: str) -> None: ...


@dataclass(frozen=True)
class Budget:
    """A :class:`DialogueBudget` made of two functions."""

    allows: BudgetCheck
    ended: DialogueEnded


def as_budget(budget: DialogueBudget | tuple[BudgetCheck, DialogueEnded] | None) -> DialogueBudget | None:
    """A budget given the older way, as the pair ``(allows, ended)``, as a :class:`DialogueBudget`."""
    if isinstance(budget, tuple):
        return Budget(*budget)
    return budget


class BudgetGate:
    """Asks a run's budget, on the store's thread, whether a dialogue may start; while the budget says "not before
    another dialogue ends", waits for one to end and asks again."""

    def __init__(self, budget: DialogueBudget, write: StoreWriter) -> None:
        self._budget, self._write = budget, write
        self._changed = asyncio.Condition()
        self._ended = 0

    async def admits(self, thread_id: str) -> bool:
        while True:
            seen = self._ended
            verdict = await asyncio.wrap_future(self._write.submit(self._budget.allows, thread_id))
            if verdict is not None:
                return verdict
            async with self._changed:
                await self._changed.wait_for(lambda: self._ended > seen)  # noqa: B023 - awaited in this iteration

    async def ended(self, thread_id: str) -> None:
        await asyncio.wrap_future(self._write.submit(self._budget.ended, thread_id))
        async with self._changed:
            self._ended += 1
            self._changed.notify_all()
