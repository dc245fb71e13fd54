"""Queries over the project's tables shared by the reader and the writer: runs, dialogues, turns, branches.

Both classes hold a ``db`` (sqlite-utils over one connection): the reader's is read-only,
the writer's is the one that also writes. A branch is an ordinary ``dialogues`` row whose
``parent_thread_id``, ``fork_turn``, ``fork_checkpoint_id`` and ``change`` say where it came
from, so the branch tree is a query; named groups of branches (``counterfactual_sets`` /
``counterfactual_members``) are what ``python -m graph.compare --set NAME`` pairs up.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

import sqlite_utils

from checkpoints import scores
from checkpoints.vocabulary import PRIMARY_LABELS, REASONING_LABELS

if TYPE_CHECKING:
    from pathlib import Path

    from checkpoints.location import PostgresURL


class StoreQueries:
    """Read methods over ``self.db``; mixed into :class:`checkpoints.readers.Reader` and
    :class:`checkpoints.store.Writer`."""

    db: sqlite_utils.Database
    path: Path | PostgresURL

    def query(self, sql: str, params: Any = ()) -> list[dict[str, Any]]:
        """Rows of one read query as dicts."""
        return list(self.db.query(sql, params))

    def table_names(self) -> list[str]:
        return self.db.table_names()

    # --- runs -----------------------------------------------------------------
    def get_run(self, run_id: str | None) -> dict[str, Any] | None:
        rows = list(self.db["runs"].rows_where("id = ?", [run_id]))
        if not rows:
            return None
        row = rows[0]
        for key in ("config", "prompt_hashes", "versions"):
            row[key] = json.loads(row[key] or "{}")
        return row

    def runs(self) -> list[dict[str, Any]]:
        return list(self.db.query("select id, created_at, ended_at, status from runs order by created_at"))

    def dialogue_counts(self) -> dict[str, int]:
        """Run id → number of dialogues (branches included)."""
        return {
            r["run_id"]: r["n"] for r in self.db.query("select run_id, count(*) as n from dialogues group by run_id")
        }

    # --- dialogues ------------------------------------------------------------
    def get_dialogue(self, thread_id: str) -> dict[str, Any] | None:
        rows = list(self.db["dialogues"].rows_where("thread_id = ?", [thread_id]))
        return rows[0] if rows else None

    def dialogues(self, run_id: str | None = None) -> list[dict[str, Any]]:
        if run_id is None:
            return list(self.db["dialogues"].rows_where(order_by="run_id, thread_id"))
        return list(self.db["dialogues"].rows_where("run_id = ?", [run_id], order_by="thread_id"))

    # --- turns and labels -----------------------------------------------------
    def turns(self, thread_id: str, *, label_set: str = PRIMARY_LABELS) -> list[dict[str, Any]]:
        """The stored turns of one dialogue with their labels from one label set."""
        return list(
            self.db.query(
                f"""
                select t.*, l.label, l.rationale, l.p_biased, l.judge_raw, l.judge_model, l.latency_judge
                from turns t left join {scores.labels_source(self.db)} l
                  on l.thread_id = t.thread_id and l.idx = t.idx and l.label_set = :label_set
                where t.thread_id = :thread_id order by t.idx
                """,
                {"thread_id": thread_id, "label_set": label_set},
            )
        )

    def label_matrix(self, run_id: str, *, label_set: str = PRIMARY_LABELS) -> dict[str, list[str | None]]:
        """thread id → labels by turn (index 0 is turn 1; None where a turn has no label)."""
        matrix: dict[str, list[str | None]] = {}
        for d in self.dialogues(run_id):
            matrix[d["thread_id"]] = [None] * int(d["max_turns"])
        for row in self.db.query(
            f"""
            select l.thread_id, l.idx, l.label from {scores.labels_source(self.db)} l
            join dialogues d on d.thread_id = l.thread_id
            where d.run_id = ? and l.label_set = ?
            """,
            [run_id, label_set],
        ):
            row_labels = matrix[row["thread_id"]]
            if 1 <= row["idx"] <= len(row_labels):
                row_labels[row["idx"] - 1] = row["label"]
        return matrix

    def unparsed_explanations(self, run_id: str, *, label_set: str = PRIMARY_LABELS) -> list[str | None]:
        """The stored explanation (its first line: why) of every unparsed label of the run in ``label_set``."""
        rows = self.db.query(
            f"select l.rationale from {scores.labels_source(self.db)} l join dialogues d on d.thread_id = l.thread_id "
            "where d.run_id = ? and l.label_set = ? and l.label = 'unparsed' order by l.thread_id, l.idx",
            [run_id, label_set],
        )
        return [row["rationale"] for row in rows]

    def labels(self, thread_id: str, *, label_set: str = PRIMARY_LABELS) -> list[str | None]:
        """Labels by turn (index 0 is turn 1), None where a turn has none; as long as the dialogue."""
        row = self.get_dialogue(thread_id)
        rows = list(
            self.db.query(
                f"select idx, label from {scores.labels_source(self.db)} l where thread_id = ? and label_set = ? "
                "order by idx",
                [thread_id, label_set],
            )
        )
        length = max([int(row["max_turns"] or 0) if row else 0, *(r["idx"] for r in rows)], default=0)
        labels: list[str | None] = [None] * length
        for r in rows:
            if r["idx"] >= 1:
                labels[r["idx"] - 1] = r["label"]
        return labels

    # --- the branch tree ------------------------------------------------------
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

    def threads_of_run(self, run_id: str) -> list[str]:
        """The run's dialogues plus every branch descending from them, whichever run made the branch."""
        found = [r["thread_id"] for r in self.db.query("select thread_id from dialogues where run_id = ?", [run_id])]
        frontier = list(found)
        while frontier:
            marks = ",".join("?" * len(frontier))
            children = [
                r["thread_id"]
                for r in self.db.query(f"select thread_id from dialogues where parent_thread_id in ({marks})", frontier)
            ]
            frontier = [c for c in children if c not in found]
            found += frontier
        return found

    # --- counterfactual sets --------------------------------------------------
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

    # --- what evaluation reads ---------------------------------------------------
    def label_set_rows(self, run_id: str, kind: str | None = None) -> list[dict[str, Any]]:
        """The post-hoc label sets of a run (re-judgings, refusal classifiers, coherence scorers), oldest first."""
        where, params = "run_id = ?", [run_id]
        if kind is not None:
            where += " and kind = ?"
            params.append(kind)
        return list(self.db["label_sets"].rows_where(where, params, order_by="created_at, name"))

    def scored_turns(self, run_id: str, *, label_set: str, classifier: str | None) -> list[dict[str, Any]]:
        """Every turn of a run with its label from ``label_set`` and its refusal verdict from ``classifier``."""
        return list(
            self.db.query(
                f"""
                select t.thread_id, t.idx, t.user_message, t.reply, t.utterance_type, t.leakage, t.leaked,
                       t.user_attempts,
                       t.non_reply, l.label, l.rationale, l.p_biased, l.judge_model,
                       r.refused, r.thread_id as refusal_row,
                       t.reasoning, t.reasoning_carrier, z.label as reasoning_label
                from turns t
                  join dialogues d on d.thread_id = t.thread_id
                  left join {scores.labels_source(self.db)} l
                    on l.thread_id = t.thread_id and l.idx = t.idx and l.label_set = :label_set
                  left join {scores.labels_source(self.db)} z
                    on z.thread_id = t.thread_id and z.idx = t.idx and z.label_set = :reasoning_set
                  left join {scores.refusals_source(self.db)} r
                    on r.thread_id = t.thread_id and r.idx = t.idx and r.classifier = :classifier
                where d.run_id = :run_id
                order by t.thread_id, t.idx
                """,
                {
                    "run_id": run_id,
                    "label_set": label_set,
                    "classifier": classifier or "",
                    "reasoning_set": REASONING_LABELS,
                },
            )
        )

    def coherence_scores(self, run_id: str, scorer: str) -> dict[str, float | None]:
        """Thread id → the coherence score ``scorer`` gave (None where its answer was unreadable)."""
        rows = self.db.query(
            f"""
            select c.thread_id, c.score from {scores.coherence_source(self.db)} c
            join dialogues d on d.thread_id = c.thread_id
            where d.run_id = ? and c.scorer = ?
            """,
            [run_id, scorer],
        )
        return {row["thread_id"]: None if row["score"] is None else float(row["score"]) for row in rows}

    def non_replies(self, run_id: str) -> dict[str, int]:
        """How many of the run's target answers were each kind of non-reply (turns.non_reply), by kind."""
        rows = self.db.query(
            "select t.non_reply, count(*) as n from turns t join dialogues d on d.thread_id = t.thread_id "
            "where d.run_id = ? and t.non_reply is not null group by t.non_reply order by t.non_reply",
            [run_id],
        )
        return {row["non_reply"]: int(row["n"]) for row in rows}

    def reasoning_counts(self, run_id: str) -> dict[str, int]:
        """How many of the run's target replies came with reasoning, by where it came from (turns.reasoning_carrier)."""
        rows = self.db.query(
            "select t.reasoning_carrier, count(*) as n from turns t join dialogues d on d.thread_id = t.thread_id "
            "where d.run_id = ? and t.reasoning is not null group by t.reasoning_carrier order by t.reasoning_carrier",
            [run_id],
        )
        return {str(row["reasoning_carrier"]): int(row["n"]) for row in rows}

    def user_turns(self, run_id: str, *, with_reply: bool = False) -> list[dict[str, Any]]:
        """The run's turns in order: user message, reply and the user message's seed-leakage fields."""
        reply = " and t.reply is not null" if with_reply else ""
        return list(
            self.db.query(
                "select t.thread_id, t.idx, t.user_message, t.reply, t.leakage, t.leaked, t.user_attempts from turns t "
                f"join dialogues d on d.thread_id = t.thread_id where d.run_id = ?{reply} order by t.thread_id, t.idx",
                [run_id],
            )
        )

    def token_rows(self, *, run_id: str | None = None, thread_id: str | None = None) -> list[dict[str, Any]]:
        """Per turn of a run, of one dialogue, or of the whole store: stored token counts and the three roles' model
        specs."""
        where, params = "1 = 1", {}
        if run_id is not None:
            where, params = "d.run_id = :run_id", {"run_id": run_id}
        if thread_id is not None:
            where, params = "t.thread_id = :thread_id", {"thread_id": thread_id}
        return list(
            self.db.query(
                "select t.thread_id, t.idx, t.tokens, t.user_model, t.target_model, l.judge_model, d.target as "
                "dialogue_target "
                "from turns t join dialogues d on d.thread_id = t.thread_id left join "
                f"{scores.labels_source(self.db)} l "
                f"on l.thread_id = t.thread_id and l.idx = t.idx and l.label_set = :label_set where {where}",
                {"label_set": PRIMARY_LABELS, **params},
            )
        )

    def latest_validation(self, judge_model: str, prompt_hash: str) -> dict[str, Any] | None:
        """The newest ``evals.judge`` score of this judge spec with this prompt, or None."""
        if "judge_validations" not in self.table_names():
            return None
        rows = list(
            self.db.query(
                "select * from judge_validations where judge_model = ? and prompt_hash = ? order by created_at "
                "desc, id desc limit 1",
                [judge_model, prompt_hash],
            )
        )
        return rows[0] if rows else None

    # --- scores -----------------------------------------------------------------
    def scored_items(self, run_id: str, *, key: str, scorer: str) -> set[tuple[str, int, str]]:
        """(thread, turn, subject) of every verdict of ``key`` by ``scorer`` on the run's dialogues."""
        return scores.scored_items(self.db, run_id=run_id, key=key, scorer=scorer)

    def run_scores(self, run_id: str, *, key: str, scorer: str) -> list[scores.ScoreRow]:
        """Every verdict of ``key`` by ``scorer`` on the run's dialogues, by thread, turn and subject."""
        return scores.run_scores(self.db, run_id=run_id, key=key, scorer=scorer)

    def scores_of(self, *, key: str, scorer: str, thread_id: str | None = None) -> list[scores.ScoreRow]:
        """Every verdict of ``key`` by ``scorer`` (of one dialogue, if given), by thread, turn and subject."""
        return scores.scores_of(self.db, key=key, scorer=scorer, thread_id=thread_id)
