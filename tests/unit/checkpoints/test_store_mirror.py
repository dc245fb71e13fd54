"""The store mirror: record_turns and upsert_dialogue write what sqlite-utils' upsert wrote, step by step, without its
schema lookups."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from checkpoints.scores import labels_source
from checkpoints.store import open_writer

STEPS = [
    [{"index": 1, "user_message": "Is it true?", "utterance_type": "question"}],  # user message only: no row yet
    [
        {
            "index": 1,
            "user_message": "Is it true?",
            "utterance_type": "question",
            "reply": "No.",
            "target_model": "t",
            "latency_target": 0.5,
            "tokens": {"target": {"input_tokens": 3}},
            "leakage": 0.2,
            "leaked": False,
            "leakage_containment": 0.2,
            "leakage_ngram": 0.1,
            "user_attempts": 2,
            "user_rejected": ["drafts"],
        }
    ],
    [
        {
            "index": 1,
            "user_message": "Is it true?",
            "reply": "No.",
            "label": "not_biased",
            "rationale": "fine",
            "p_biased": 0.25,
            "judge_raw": "Label: not biased",
            "judge_model": "j",
            "latency_judge": 0.1,
        },
        {"index": 2, "user_message": "And now?", "reply": "Still no.", "label": "biased"},
    ],
    [{"index": 2, "user_message": "And now?", "reply": "Edited.", "label": "unparsed", "rationale": None}],
]


def _rows(path: Path) -> dict[str, list[tuple]]:
    with sqlite3.connect(path) as conn:
        return {
            "turns": conn.execute("select * from turns order by thread_id, idx").fetchall(),
            "dialogues": conn.execute("select * from dialogues order by thread_id").fetchall(),
            "labels": conn.execute(
                "select thread_id, idx, label_set, label, rationale, p_biased, judge_raw, judge_model, "
                f"latency_judge from {labels_source(conn)} order by thread_id, idx, label_set"
            ).fetchall(),
        }


def test_the_mirror_writes_the_rows_sqlite_utils_upserts_wrote(tmp_path: Path, monkeypatch):
    import checkpoints.store as store_module

    def sqlite_utils_upsert(conn, table, rows, pk):  # the mirror as it was
        import sqlite_utils

        sqlite_utils.Database(conn)[table].upsert_all(rows, pk=pk if len(pk) > 1 else pk[0])

    results = []
    for name, patch in (("new", False), ("old", True)):
        with monkeypatch.context() as m:
            if patch:
                m.setattr(store_module, "_upsert", sqlite_utils_upsert)
            store = open_writer(tmp_path / f"{name}.db")
            store.upsert_dialogue("th", run_id="r", seed_id="s1", mode="implicit", max_turns=2, status="running")
            store.upsert_dialogue("th", status="finished", stop_reason="max_turns", error=None)
            store.upsert_dialogue("th")
            store.upsert_dialogue("other", run_id="r", status="failed", error="boom")
            for step in STEPS:
                store.record_turns("th", step)
                store.record_turns("th", step, label_set="rejudged")
            store.close()
        results.append(_rows(tmp_path / f"{name}.db"))
    assert results[0] == results[1]
    assert [r[1] for r in results[0]["turns"]] == [1, 2] and len(results[0]["labels"]) == 4
    assert results[0]["labels"][2][3:5] == ("unparsed", None)


def test_a_turn_with_only_its_user_message_opens_no_transaction(tmp_path: Path):
    store = open_writer(tmp_path / "d.db")
    statements: list[str] = []
    store.db.conn.set_trace_callback(statements.append)
    store.record_turns("th", STEPS[0])
    assert statements == []
    store.record_turns("th", STEPS[1])
    assert statements[0] == "BEGIN IMMEDIATE" and statements[-1] == "COMMIT"
    store.close()


def test_upsert_dialogue_keeps_the_columns_it_is_not_given(tmp_path: Path):
    store = open_writer(tmp_path / "d.db")
    store.upsert_dialogue("th", run_id="r", seed_id="s1", max_turns=2, status="running")
    store.upsert_dialogue("th", status="finished", error=None)
    store.upsert_dialogue("th")
    row = store.get_dialogue("th")
    assert (row["run_id"], row["seed_id"], row["max_turns"], row["status"], row["error"]) == (
        "r",
        "s1",
        2,
        "finished",
        None,
    )
    store.close()
