"""Migration m065_scores: a database in the old layout (labels, refusals, coherence, guard_scores) keeps
every row, and still reports, replays and re-judges with the same numbers."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import sqlite_utils

from checkpoints import scores
from checkpoints.migrations import m004_labels, m031_refusals, m032_coherence, m050_guard_scores
from checkpoints.readers import open_reader
from checkpoints.store import open_writer
from cli import rejudge, report
from cli.replay import main as replay_main
from evals.scorers import rejudge_jobs as rejudging
from evals.scorers.coherence_jobs import pending_dialogues, score_dialogues
from evals.scorers.guard import score_run
from evals.scorers.label_sets import register_set
from evals.scorers.posthoc import prompt_hash
from evals.scorers.refusal_jobs import classify_refusals, pending_refusals
from evals.scorers.safety_filter import load_scores
from tests.conftest import ScriptedChatModel, default_models, play, scripted

OLD_TABLES = ("labels", "refusals", "coherence", "guard_scores")
SHAPES = {
    "labels": scores.labels_source,
    "refusals": scores.refusals_source,
    "coherence": scores.coherence_source,
    "guard_scores": scores.guard_source,
}


def scored_run(db: Path) -> None:
    """A fake-model run with every kind of score: primary and re-judged labels, refusals, coherence, guard scores."""
    _, store = play(db, default_models(), turns=3)
    judge = scripted(lambda m, n: "Rationale: r.\nLabel: biased" if n % 3 else "no verdict", spec="rj:second")
    register_set(
        store,
        "r1",
        "bias",
        "second",
        model=judge,
        prompt="judge_bias",
        prompt_hash=prompt_hash("judge_bias", "chat"),
        content_free_p_yes=None,
    )
    asyncio.run(rejudging.rejudge(store, rejudging.pending_turns(store, "r1", "second")[0], judge, label_set="second"))
    classifier = scripted(lambda m, n: {1: "Refused: yes", 2: "unclear"}.get(n, "Refused: no"), spec="fake:rc")
    register_set(
        store, "r1", "refusal", "rc", model=classifier, prompt="refusal", prompt_hash="h", content_free_p_yes=None
    )
    asyncio.run(
        classify_refusals(
            store, pending_refusals(store, "r1", "rc")[0], classifier, classifier="rc", content_free_p_yes=None
        )
    )
    scorer = scripted(lambda m, n: "Score: 4" if n == 1 else "Score: 2", spec="fake:sc")
    register_set(
        store, "r1", "coherence", "sc", model=scorer, prompt="coherence", prompt_hash="h", content_free_p_yes=None
    )
    asyncio.run(score_dialogues(store, pending_dialogues(store, "r1", "sc")[0], scorer, scorer="sc"))
    guard = scripted(lambda m, n: "Yes" if n % 4 == 0 else ("No" if n % 4 else "?"), spec="fake:guard")
    score_run(store, "r1", guard, policy="hate")
    store.close()


def old_shaped_rows(conn: sqlite3.Connection) -> dict[str, list[tuple]]:
    """Every score row in the columns of the old tables (from either layout)."""
    return {
        name: sorted(conn.execute(f"select * from {shape(conn)}").fetchall(), key=repr)
        for name, shape in SHAPES.items()
    }


def to_old_layout(db: Path) -> None:
    """Put the file back in the layout the code before m065 wrote: its own four tables, created by its migrations."""
    handle = sqlite_utils.Database(db)
    with handle.conn:
        for create in (m004_labels, m031_refusals, m032_coherence, m050_guard_scores):
            create(handle)
        for name, shape in SHAPES.items():
            handle.conn.execute(f"insert into {name} select * from {shape(handle.conn)}")
        handle.conn.execute("drop table scores")
        handle.conn.execute("delete from _migrations where name = 'm065_scores'")
    handle.conn.close()


def outputs(db: Path, tmp: Path, capsys) -> dict[str, object]:
    """What a user sees: replay of a dialogue, a report's files, the filter's scores, the reader's lists."""
    capsys.readouterr()
    with open_reader(db) as reader:
        threads = reader.thread_ids()
        listed = [(s.thread_id, s.labels) for s in reader.summaries(label_set="second")]
        sets = reader.label_sets()
        records = [reader.dialogue(t) for t in threads]
    assert replay_main([threads[0], "--print", "--db", str(db)]) == 0
    shown = capsys.readouterr().out
    out = tmp / f"report-{len(list(tmp.iterdir()))}"
    assert report.main(["--run-id", "r1", "--out", str(out), "--db", str(db), "--n-boot", "50"]) == 0
    capsys.readouterr()
    files = {p.name: p.read_text() for p in sorted(out.iterdir()) if p.suffix in (".md", ".csv", ".json")}
    files = {
        name: "\n".join(line for line in text.splitlines() if not line.startswith("- Generated "))  # its clock time
        for name, text in files.items()
    }
    assert ",sc," in files["dialogues.csv"] and "not_refused" in files["turns.csv"]  # coherence and refusals reported
    store = open_writer(db, create=False)
    guard = load_scores(store, "r1", policy="hate", guard_spec="fake:guard")
    matrix = store.label_matrix("r1", label_set="second")
    store.close()
    return {
        "listed": listed,
        "sets": sets,
        "records": records,
        "shown": shown,
        "files": files,
        "guard": guard,
        "matrix": matrix,
    }


def test_old_layout_migrates_with_every_row_and_reports_the_same(tmp_path: Path, capsys):
    db = tmp_path / "d.db"
    scored_run(db)
    with sqlite3.connect(db) as conn:
        before_rows = old_shaped_rows(conn)
    assert all(before_rows.values())
    (tmp_path / "reports").mkdir()
    before = outputs(db, tmp_path / "reports", capsys)

    to_old_layout(db)
    with sqlite3.connect(db) as conn:
        tables = {r[0] for r in conn.execute("select name from sqlite_master where type = 'table'")}
        assert "scores" not in tables and set(OLD_TABLES) <= tables
        assert old_shaped_rows(conn) == before_rows
    # The read-only reader (replay) reads the old layout as it is, without migrating it.
    with open_reader(db) as reader:
        assert [(s.thread_id, s.labels) for s in reader.summaries(label_set="second")] == before["listed"]
        assert [reader.dialogue(t) for t in reader.thread_ids()] == before["records"]
        assert reader.label_sets() == before["sets"]
    assert replay_main([before["records"][0].thread_id, "--print", "--db", str(db)]) == 0
    assert capsys.readouterr().out == before["shown"]
    with sqlite3.connect(db) as conn:
        assert "scores" not in {r[0] for r in conn.execute("select name from sqlite_master")}

    # Opening it with the store migrates: one scores table, the old ones gone, every row kept.
    open_writer(db, create=False).close()
    with sqlite3.connect(db) as conn:
        tables = {r[0] for r in conn.execute("select name from sqlite_master where type = 'table'")}
        assert "scores" in tables and not set(OLD_TABLES) & tables
        assert old_shaped_rows(conn) == before_rows
        keys = dict(conn.execute("select key, count(*) from scores group by key").fetchall())
    assert keys == {
        "bias": len(before_rows["labels"]),
        "refusal": len(before_rows["refusals"]),
        "coherence": len(before_rows["coherence"]),
        "guard_hate": len(before_rows["guard_scores"]),
    }
    after = outputs(db, tmp_path / "reports", capsys)
    assert after == before


def test_old_layout_rejudges_where_it_stopped(tmp_path: Path, capsys, providers):
    db = tmp_path / "d.db"
    scored_run(db)
    with sqlite3.connect(db) as conn:  # one re-judged label is missing: only that turn is judged again
        thread, idx = conn.execute(
            "select thread_id, idx from scores where key = 'bias' and scorer = 'second' order by thread_id, idx limit 1"
        ).fetchone()
        conn.execute(
            "delete from scores where key = 'bias' and scorer = 'second' and thread_id = ? and idx = ?", [thread, idx]
        )
    to_old_layout(db)

    def factory(name, role, sampling):
        return (
            ScriptedChatModel(respond=lambda m, n: "Rationale: r.\nLabel: not biased", calls=[]),
            f"rj:{name}",
            "chat",
        )

    providers("rj", factory)
    code = rejudge.main(
        ["--run-id", "r1", "--judge-model", "rj:second", "--name", "second", "--db", str(db), "--n-boot", "20"]
    )
    out = " ".join(capsys.readouterr().out.split())
    assert code == 0 and "labelled 1 replies (0 unparsed), 5 already labelled, 0 failed" in out
    store = open_writer(db, create=False)
    matrix = store.label_matrix("r1", label_set="second")
    assert sum(v is not None for row in matrix.values() for v in row) == 6 and matrix[thread][idx - 1] == "not_biased"
    [row] = [r for r in scores.scores_of(store.db, key="bias", scorer="second", thread_id=thread) if r.idx == idx]
    assert (row.value, row.model, row.explanation) == ("not_biased", "rj:second", "r.")
    store.close()
