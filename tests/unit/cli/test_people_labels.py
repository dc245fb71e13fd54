"""People's labels kept whole: ``annotate validate`` stores every row of the files or none, refuses (one line, exit 2)
an id that is not a turn of the run, and reads ``THREAD#01`` as ``THREAD#1`` (one turn, never two rows for it)."""

from __future__ import annotations

import csv
import sqlite3
from pathlib import Path

import pytest

from checkpoints.store import open_writer
from cli import annotate
from tests.conftest import default_models, play
from tests.support.annotation_files import label_export


def _human_rows(db: Path) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute("select thread_id, idx, value from scores where scorer = 'human' order by 1, 2").fetchall()


@pytest.fixture
def exported(tmp_path: Path) -> tuple[Path, Path, list[dict[str, str]]]:
    db = tmp_path / "dialogues.db"
    play(db, default_models(), turns=4, run_id="r1")[1].close()
    play(db, default_models(), turns=2, run_id="other")[1].close()
    out = tmp_path / "draw.csv"
    argv = ["export", "--run-id", "r1", "--design", "random", "--sample", "6", "--out", str(out), "--db", str(db)]
    assert annotate.main(argv) == 0
    store = open_writer(db)
    label_export(out, store)
    store.close()
    return db, out, list(csv.DictReader(out.open()))


def _write(path: Path, rows: list[dict[str, str]]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _validate(db: Path, path: Path) -> int:
    return annotate.main(["validate", str(path), "--run-id", "r1", "--db", str(db)])


@pytest.mark.parametrize(
    "bad, said",
    [
        (lambda row: row["item_id"].rsplit("#", 1)[0] + "#9", "is not a turn of run r1 (its dialogue has turns 1-4)"),
        (lambda row: "other:s-age:implicit#1", "is not a dialogue of run r1"),
        (lambda row: "no-turn-number", "is not an item id (THREAD#TURN)"),
    ],
    ids=["turn 9 of a 4-turn dialogue", "a turn of another run", "not an id"],
)
def test_a_row_that_is_not_a_turn_of_the_run_refuses_the_file_and_nothing_is_stored(
    exported, tmp_path, bad, said, capsys
):
    db, _, rows = exported
    rows[-1]["item_id"] = bad(rows[-1])
    path = tmp_path / "bad.csv"
    _write(path, rows)
    with pytest.raises(SystemExit) as stopped:
        _validate(db, path)
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and err.count("\n") == 1, err
    assert said in err and "nothing was stored" in err, err
    assert _human_rows(db) == []


def test_a_zero_padded_turn_is_that_turn_and_the_same_turn_twice_is_refused(exported, tmp_path, capsys):
    db, _, rows = exported
    padded = [dict(r, item_id=r["item_id"].replace("#", "#0")) for r in rows]
    path = tmp_path / "padded.csv"
    _write(path, padded)
    assert _validate(db, path) == 0
    stored = _human_rows(db)
    wanted = sorted((r["item_id"].rsplit("#", 1)[0], int(r["item_id"].rsplit("#", 1)[1])) for r in rows)
    assert [(t, i) for t, i, _ in stored] == wanted  # stored as THREAD#1, one row per turn
    capsys.readouterr()
    twice = tmp_path / "twice.csv"
    _write(twice, [*rows, dict(rows[0], item_id=rows[0]["item_id"].replace("#", "#0"))])
    with pytest.raises(SystemExit) as stopped:
        _validate(db, twice)
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and "are the same turn" in err and "nothing was stored" in err, err
    assert _human_rows(db) == stored
