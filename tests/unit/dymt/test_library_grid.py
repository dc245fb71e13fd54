"""``import dymt``: a grid, its turns and dialogues as DataFrames, a branch and a report, on a compatible server."""

from __future__ import annotations

import asyncio
import csv
import json
from pathlib import Path

import pytest

import dymt
from tests.support.stub_server import StubServer


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    """A 2-mode × 2-target grid on a stub OpenAI-compatible server, played through dymt.run."""
    tmp = tmp_path_factory.mktemp("api")
    db = tmp / "d.db"
    with pytest.MonkeyPatch.context() as mp, StubServer() as stub:
        mp.setenv("OPENAI_API_KEY", "not-needed-by-the-stub")
        summary = dymt.run(
            db=db,
            run_id="grid",
            mode=["implicit", "assessment"],
            turns=2,
            categories=["gender", "age"],
            user_model="openai:helper",
            judge_model="openai:helper",
            target_model=["openai:a", "openai:b"],
            base_url=stub.url,
            trace=False,
        ).to_json()
        thread = f"grid:{_first_seed(db)}:implicit:openai:a"

        async def in_a_notebook():  # a Jupyter kernel already runs an event loop
            return dymt.branch(thread, db=db, turn=2, user_message="What about men?", base_url=stub.url).to_json()

        made = asyncio.run(in_a_notebook())
        yield db, summary, made, stub


def _read(db: Path | str, table: str, *args, **options):
    with dymt.open(db) as store:
        return getattr(store, table)(*args, **options)


def _report(run_ids, *, out: Path, db: Path, **options) -> list[Path]:
    result = dymt.report(run_ids, out=out, db=db, **options)
    return sorted(out / name for name in result.files)


def _first_seed(db: Path) -> str:
    frame = _read(db, "dialogues", "grid")
    return sorted(frame["seed_id"])[0]


def test_run_returns_the_commands_json_summary(grid):
    _, summary, _, stub = grid
    assert summary["run_id"] == "grid" and summary["finished"] == 8 and summary["failed"] == []
    assert {r["model"] for r in stub.requests} >= {"helper", "a", "b"}


def test_turns_and_dialogues_are_the_reports_rows_as_dataframes(grid, tmp_path):
    pd = pytest.importorskip("pandas")
    db, _, _, _ = grid
    turns = _read(db, "turns", "grid")
    dialogues = _read(db, "dialogues", "grid")
    assert isinstance(turns, pd.DataFrame) and isinstance(dialogues, pd.DataFrame)
    assert len(turns) == 16 and len(dialogues) == 8
    assert set(dialogues["mode"]) == {"implicit", "assessment"} and set(dialogues["target_model"]) == {
        "openai:a",
        "openai:b",
    }
    assert dialogues.groupby(["mode", "target_model"]).size().to_dict() == {
        (m, t): 2 for m in ("assessment", "implicit") for t in ("openai:a", "openai:b")
    }
    # The same rows as the report's turns.csv (written by dymt.report).
    files = _report("grid", out=tmp_path / "rep", db=db, n_boot=20)
    with (tmp_path / "rep" / "turns.csv").open(encoding="utf-8") as handle:
        from_csv = list(csv.DictReader(handle))
    assert [r["reply"] for r in from_csv] == list(turns["reply"])
    assert [r["label"] for r in from_csv] == list(turns["label"])
    assert {p.name for p in files} >= {"report.md", "turns.csv", "dialogues.csv"} and "report.html" not in {
        p.name for p in files
    }
    records = _read(db, "turns", "grid", as_frame=False)
    assert isinstance(records, list) and records[0].keys() >= {"thread_id", "turn", "reply", "label", "rationale"}


def test_branch_returns_the_new_branch_and_it_reads_back(grid):
    db, _, made, _ = grid
    (row,) = made["branches"]
    assert (
        row["fork_turn"] == 2
        and row["status"] == "finished"
        and row["thread_id"].startswith(row["parent_thread_id"] + "/")
    )
    branch_turns = _read(db, "turns", made["run_id"], as_frame=False)
    assert [(t["turn"], t["user_message"]) for t in branch_turns][-1] == (2, "What about men?")


def test_report_with_html_and_chat_records(grid, tmp_path):
    db, _, _, _ = grid
    files = {p.name for p in _report(["grid"], out=tmp_path / "rep", db=db, html=True, n_boot=20)}
    assert "report.html" in files
    records = _read(db, "chat_records", "grid")
    assert len(records) == 8 and all(r["messages"][0]["role"] == "system" for r in records)
    assert json.loads(json.dumps(records)) == records


def test_bad_input_raises_the_commands_one_line_message_and_writes_nothing(grid, tmp_path):
    db, _, _, _ = grid
    with pytest.raises(dymt.DymtError, match="unknown mode='nope'"):
        dymt.run(db=tmp_path / "new.db", mode="nope")
    assert not (tmp_path / "new.db").exists()
    with pytest.raises(dymt.DymtError, match="unknown option 'turn_count'"):
        dymt.run(db=db, turn_count=3)
    with pytest.raises(dymt.DymtError, match="no run 'missing'"):
        _read(db, "turns", "missing")
    with pytest.raises(dymt.DymtError, match="no database at"):
        _read(tmp_path / "absent.db", "dialogues", "grid")
    with pytest.raises(dymt.DymtError, match="cannot be forked at turn 9: .*turn.* must be between 1 and 2"):
        dymt.branch(f"grid:{_first_seed(db)}:implicit:openai:a", db=db, turn=9, rerun=True)
