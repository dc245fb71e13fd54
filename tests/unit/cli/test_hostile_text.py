"""Model text is only text: a reply full of terminal escape sequences (CSI, OSC 0/8/52 ended by BEL and by ESC \\),
C1 controls, NUL, rich markup and a lone surrogate is stored as it came (the surrogate as U+FFFD), never fails a
dialogue, and every terminal view shows it inert."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from cli import annotate, replay, runs, trace
from cli.progress_log import ProgressLog
from tests.conftest import default_models, play, scripted

HOSTILE = (
    "A\x1b[2J\x1b[H clear "  # CSI: clear the screen, cursor home
    "\x1b]0;PWNED-TITLE\x07 "  # OSC 0 (window title) ended by BEL
    "\x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\ "  # OSC 8 link ended by ESC \
    "\x1b]52;c;ZXZpbA==\x07 "  # OSC 52: writes the clipboard
    "\x1b]52;c;ZXZpbA==\x1b\\ "
    "[bold]bold[/] [/] [link=http://x]l[/link] "  # rich markup
    "nul\x00 c1\x9b31m sur\ud800 end"
)
# What must never reach a terminal: the sequences' introducers, raw.
RAW = ("\x1b", "\x07", "\x9b", "\x9d", "\ud800")


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    db = tmp_path_factory.mktemp("hostile") / "dialogues.db"

    def judge(messages, n):
        raise RuntimeError(f"the judge read {HOSTILE}")

    play(db, default_models(target=scripted(lambda m, n: HOSTILE, spec="fake:target")), turns=2, run_id="h")[1].close()
    play(db, default_models(judge=scripted(judge, spec="fake:judge")), turns=1, run_id="bad")[1].close()
    with sqlite3.connect(db) as conn:
        thread = conn.execute("select thread_id from dialogues where run_id = 'h' order by 1 limit 1").fetchone()[0]
    return db, thread


def test_the_reply_is_stored_as_it_came_and_the_lone_surrogate_visibly_replaced(hostile):
    db, _ = hostile
    with sqlite3.connect(db) as conn:
        statuses = conn.execute("select status, count(*) from dialogues where run_id = 'h' group by 1").fetchall()
        replies = {
            r
            for (r,) in conn.execute(
                "select reply from turns t join dialogues d using (thread_id) where d.run_id = 'h'"
            )
        }
    assert statuses == [("finished", 2)]
    assert replies == {HOSTILE.replace("\ud800", "\ufffd")}  # NUL, ESC, C1 and markup kept as data


@pytest.mark.parametrize(
    "view",
    ["trace show", "trace show --full", "trace list", "replay --print", "replay --list", "runs status", "runs list"],
)
def test_every_terminal_view_shows_escape_sequences_inert(hostile, view, capsys):
    db, thread = hostile
    where = ["--db", str(db)]
    argv = {
        "trace show": (trace.main, [*where, "show", thread]),
        "trace show --full": (trace.main, [*where, "show", thread, "--full"]),
        "trace list": (trace.main, [*where, "list"]),
        "replay --print": (replay.main, [*where, "--print", thread]),
        "replay --list": (replay.main, [*where, "--list"]),
        "runs status": (runs.main, [*where, "status", "bad"]),
        "runs list": (runs.main, [*where, "list"]),
    }[view]
    main, args = argv
    assert main(args) == 0
    out = capsys.readouterr()
    shown = out.out + out.err
    assert not [c for c in RAW if c in shown], [c for c in RAW if c in shown]
    if view in ("trace show --full", "replay --print"):  # the reply itself, whole: its markup as literal text
        assert "[bold]bold[/] [/] [link=http://x]l[/link]" in " ".join(shown.split())
        assert "␛]0;PWNED-TITLE␇" in shown and "␛]52;c;ZXZpbA==␛\\" in shown and "␀" in shown
    if view == "runs status":  # the failed dialogues' reasons, with the text the error quoted
        assert "the judge read A␛[2J" in shown


def test_the_progress_log_writes_an_error_text_inert():
    import io

    stream = io.StringIO()
    log = ProgressLog(total=1, turns_per_dialogue=1, stream=stream)
    log.write_line(f"provider said {HOSTILE}")
    written = stream.getvalue()
    assert written.endswith("\n") and written.count("\n") == 1
    assert not [c for c in RAW[:4] if c in written] and "␛[2J" in written


# The sequences as a name can hold them (a seed id, a model spec, a file name): no NUL, no surrogate.
SEQUENCES = "\x1b[2J\x1b]0;T\x07\x1b]8;;evil\x1b\\l\x1b]8;;\x1b\\\x1b]52;c;ZXZpbA==\x07\x1b]52;c;eA==\x1b\\\x9b1m"


@pytest.fixture(scope="module")
def annotated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A run whose seed ids, target spec and replies carry escape sequences; a random draw of it, labelled by an
    annotator whose file name carries them too (half biased, half not, so that rates are corrected)."""
    import csv

    from seeds import Seed

    folder = tmp_path_factory.mktemp("annotated")
    db = folder / "dialogues.db"
    seeds = [Seed(f"s{i}{SEQUENCES}", ("gender", "age")[i % 2], f"Statement {i}.") for i in range(8)]
    judge = scripted(lambda m, n: f"Rationale: r.\nLabel: {'biased' if n % 2 else 'not biased'}", spec="fake:judge")
    target = scripted(lambda m, n: HOSTILE, spec=f"fake:t{SEQUENCES}")
    play(db, default_models(target=target, judge=judge), seeds=seeds, turns=2, run_id="h")[1].close()
    drawn = folder / "draw.csv"
    assert (
        annotate.main(
            ["export", "--run-id", "h", "--design", "random", "--sample", "10", "--out", str(drawn), "--db", str(db)]
        )
        == 0
    )
    with drawn.open(newline="") as f:
        rows = list(csv.DictReader(f))
    for i, row in enumerate(rows):
        row["label"] = ("biased", "not biased")[i % 2]
    labelled = folder / f"ann{SEQUENCES}.csv"
    with labelled.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return db, drawn, labelled


def _without_raw(shown: str) -> None:
    assert not [c for c in RAW if c in shown], [c for c in RAW if c in shown]


@pytest.mark.parametrize(
    "view",
    ["export", "export random", "agree", "validate", "validate again", "plan", "export active", "plan compare"],
)
def test_annotate_shows_names_ids_and_specs_inert(annotated, view, capsys, tmp_path):
    db, drawn, labelled = annotated
    where = ["--db", str(db)]
    out = tmp_path / f"out{SEQUENCES}.csv"
    argv = {
        "export": ["export", "--run-id", "h", "--sample", "4", "--out", str(out), *where],
        "export random": ["export", "--run-id", "h", "--design", "random", "--sample", "4", "--out", str(out), *where],
        "agree": ["agree", str(labelled), str(drawn), "--run-id", "h", *where],
        "validate": ["validate", str(labelled), "--run-id", "h", *where],
        "validate again": ["validate", str(labelled), "--run-id", "h", *where],
        "plan": ["plan", "--run-id", "h", "--width", "0.3", *where],
        "export active": ["export", "--run-id", "h", "--design", "active", "--budget", "20", "--out", str(out), *where],
        "plan compare": ["plan", "--run-id", "h", "--width", "0.3", "--compare", "implicit", "assessment", *where],
    }[view]
    try:
        status = annotate.main(argv)
    except SystemExit as exc:
        status = exc.code
    shown = "".join(capsys.readouterr())
    _without_raw(shown)
    if view in ("export", "export random", "agree", "export active"):  # the file's or annotator's name, as symbols
        assert "␛[2J␛]0;T" in shown, shown  # (rich drops a BEL: it never reaches the terminal either)
    assert status in (0, 2), shown


@pytest.mark.parametrize(
    "change, said",
    [
        (lambda row: {**row, "item_id": row["item_id"] + "9"}, "is not a turn of run h"),
        (lambda row: {**row, "label": f"maybe{SEQUENCES}"}, "is not biased / not biased"),
    ],
    ids=["an id", "a label"],
)
def test_annotate_errors_quote_what_was_wrong_inert(annotated, change, said, capsys, tmp_path):
    import csv

    db, drawn, labelled = annotated
    with labelled.open(newline="") as f:
        rows = list(csv.DictReader(f))
    rows[0] = change(rows[0])
    wrong = tmp_path / f"wrong{SEQUENCES}.csv"
    with wrong.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    with pytest.raises(SystemExit) as refused:
        annotate.main(["validate", str(wrong), "--run-id", "h", "--db", str(db)])
    err = capsys.readouterr().err
    assert refused.value.code == 2 and said in err and err.count("\n") == 1, err
    _without_raw(err)
    assert "wrong␛[2J␛]0;T␇" in err, err  # the file's name, visibly


@pytest.mark.parametrize("view", ["evals.report", "graph.branches"])
def test_reports_and_trees_show_seed_ids_and_specs_inert(annotated, view, capsys, tmp_path):
    from cli import branches, report

    db, _, _ = annotated
    with sqlite3.connect(db) as conn:
        thread = conn.execute("select thread_id from dialogues order by 1 limit 1").fetchone()[0]
    main, argv = {
        "evals.report": (report.main, ["--run-id", "h", "--out", str(tmp_path / "report"), "--db", str(db)]),
        "graph.branches": (branches.main, ["--db", str(db), thread]),
    }[view]
    assert main(argv) == 0
    shown = "".join(capsys.readouterr())
    _without_raw(shown)
    assert "␛[2J" in shown, shown  # the seed id (in the thread id) or the target's spec, as symbols


def test_a_workers_log_line_writes_an_error_text_inert(capsys):
    import logging

    from cli.worker import log_handler

    handler = log_handler()
    record = logging.LogRecord("procrastinate", logging.ERROR, __file__, 1, "job failed: %s", (HOSTILE,), None)
    line = handler.format(record)
    assert "job failed: A␛[2J" in line and not [c for c in RAW if c in line], line
