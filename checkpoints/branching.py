"""The store's view of branches: the branch tree, counterfactual sets, and run status after pauses.

A branch is an ordinary ``dialogues`` row whose ``parent_thread_id``, ``fork_turn``,
``fork_checkpoint_id`` and ``change`` say where it came from, so the tree is a query.
Named groups of branches (``counterfactual_sets`` / ``counterfactual_members``) are
what ``python -m graph.compare --set NAME`` pairs up.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from checkpoints import scores
from checkpoints.store import PRIMARY_LABELS, Store, now


@dataclass
class BranchStore(Store):
    """A :class:`Store` with the branch tables; build one with ``BranchStore.of(store)``."""

    @classmethod
    def of(cls, store: Store) -> "BranchStore":
        return store if isinstance(store, BranchStore) else cls(path=store.path, db=store.db)

    # --- the tree ---------------------------------------------------------------
    def children(self, thread_id: str) -> list[dict[str, Any]]:
        """Branches made directly from ``thread_id``, by fork turn then age."""
        return list(
            self.db["dialogues"].rows_where(
                "parent_thread_id = ?", [thread_id], order_by="fork_turn, started_at, thread_id"
            )
        )

    def ancestry(self, thread_id: str) -> list[dict[str, Any]]:
        """The dialogue row of ``thread_id`` followed by its parent's, grandparent's... up to the root."""
        rows: list[dict[str, Any]] = []
        seen: set[str] = set()
        current: str | None = thread_id
        while current and current not in seen:
            seen.add(current)
            row = self.get_dialogue(current)
            if row is None:
                break
            rows.append(row)
            current = row.get("parent_thread_id")
        return rows

    def divergence_turn(self, a: str, b: str) -> int:
        """First turn at which dialogues ``a`` and ``b`` may differ: 1 if they share no history.

        A branch holds its parent's turns before its fork turn, and through the parent its
        grandparent's turns before the smaller of the two fork turns, and so on.
        """
        shared_a = self._shared_until(a)
        shared_b = self._shared_until(b)
        common = [min(shared_a[t], shared_b[t]) for t in shared_a if t in shared_b]
        turn = max(common, default=1)
        return 1 if math.isinf(turn) else int(turn)

    def _shared_until(self, thread_id: str) -> dict[str, float]:
        """Ancestor → the first turn this dialogue no longer shares with it (inf for itself)."""
        limit = math.inf
        shared: dict[str, float] = {}
        for row in self.ancestry(thread_id):
            shared[row["thread_id"]] = limit
            if row.get("fork_turn"):
                limit = min(limit, int(row["fork_turn"]))
        return shared

    def labels(self, thread_id: str, *, label_set: str = PRIMARY_LABELS) -> list[str | None]:
        """Labels by turn (index 0 is turn 1), None where a turn has none; as long as the dialogue."""
        row = self.get_dialogue(thread_id)
        rows = list(
            self.db.query(
                f"select idx, label from {scores.labels_source(self.db)} where thread_id = ? and label_set = ? order by idx",
                [thread_id, label_set],
            )
        )
        length = max([int(row["max_turns"] or 0) if row else 0, *(r["idx"] for r in rows)], default=0)
        labels: list[str | None] = [None] * length
        for r in rows:
            if r["idx"] >= 1:
                labels[r["idx"] - 1] = r["label"]
        return labels

    # --- counterfactual sets ------------------------------------------------------
    def add_set(self, name: str, *, run_id: str, parent_run_id: str | None, fork_turn: int, change: dict[str, Any]) -> None:
        """Record a new set; adding branches to an existing set keeps its first description."""
        if self.get_set(name) is None:
            self.db["counterfactual_sets"].insert(
                {
                    "name": name,
                    "created_at": now(),
                    "run_id": run_id,
                    "parent_run_id": parent_run_id,
                    "fork_turn": fork_turn,
                    "change": json.dumps(change, sort_keys=True),
                }
            )

    def add_set_member(self, set_name: str, thread_id: str, parent_thread_id: str) -> None:
        self.db["counterfactual_members"].upsert(
            {"set_name": set_name, "thread_id": thread_id, "parent_thread_id": parent_thread_id, "added_at": now()},
            pk=("set_name", "thread_id"),
        )

    def get_set(self, name: str) -> dict[str, Any] | None:
        rows = list(self.db["counterfactual_sets"].rows_where("name = ?", [name]))
        if not rows:
            return None
        row = rows[0]
        row["change"] = json.loads(row["change"] or "{}")
        return row

    def set_names(self) -> list[str]:
        return [r["name"] for r in self.db.query("select name from counterfactual_sets order by created_at, name")]

    def set_members(self, name: str) -> list[dict[str, Any]]:
        """(parent, branch) pairs of a set with the branch's fork turn and status."""
        return list(
            self.db.query(
                """
                select m.parent_thread_id, m.thread_id, d.fork_turn, d.status, d.max_turns
                from counterfactual_members m join dialogues d on d.thread_id = m.thread_id
                where m.set_name = ? order by m.parent_thread_id, m.thread_id
                """,
                [name],
            )
        )

    # --- run status ---------------------------------------------------------------
    def refresh_run_status(self, run_id: str) -> str:
        """Set a run's status from its dialogues': paused, failed, running or finished."""
        statuses = {r["status"] for r in self.db.query("select status from dialogues where run_id = ?", [run_id])}
        if "paused" in statuses:
            status = "paused"
        elif statuses & {"failed", "interrupted"}:
            status = "failed"
        elif "running" in statuses:
            status = "running"
        else:
            status = "finished"
        if self.get_run(run_id) is not None:
            self.db["runs"].update(run_id, {"status": status, "ended_at": None if status in ("paused", "running") else now()})
        return status


def describe_change(change: Any, *, reveal_seed: bool = True) -> str:
    """A branch's stored change record in a few words; a changed seed statement stays hidden unless revealed."""
    if isinstance(change, str):
        try:
            change = json.loads(change)
        except ValueError:
            return _brief(change)
    if change in (None, "", {}):
        return ""
    if not isinstance(change, dict):
        return _brief(change)
    kind = change.get("kind")
    if kind == "user_message":
        return f"user message “{_brief(change.get('user_message'))}”"
    if kind == "swap":
        return f"swap {change.get('swaps', '')}"
    if kind in ("target_model", "judge_model"):
        return f"{kind.replace('_', ' ')} → {change.get('model')}"
    if kind == "mode":
        return f"mode {change.get('replaces_mode')} → {change.get('mode')}"
    if kind == "seed_statement":
        return f"seed statement “{_brief(change.get('seed_statement'))}”" if reveal_seed else "seed statement changed (s reveals)"
    if kind == "rerun":
        return "rerun" + (f" (sampling seed {change['sampling_seed']})" if change.get("sampling_seed") is not None else "")
    if kind:
        return str(kind)
    shown = {k: v for k, v in change.items() if reveal_seed or "statement" not in k}
    return ", ".join(f"{k}={_brief(v)!r}" if isinstance(v, str) else f"{k}={_brief(v)}" for k, v in shown.items())


def _brief(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
