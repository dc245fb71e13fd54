"""Pausing (--pause-after K, --interactive) and resuming, in this process and in a new one."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

import pytest

from checkpoints.scores import labels_source
from checkpoints.store import open_writer
from graph.running.pausing import PauseOptions, Review, check_pause_options, resume_dialogue, settle_run
from graph.running.playing import StoreWriter, execute_run
from nodes.builder import build_graph
from nodes.context import RunContext
from tests.conftest import REPO, SEEDS, checkpointer, default_models, make_config
from tests.support import forked
from tests.support.backends import Db, connect, rows, written

GENDER = SEEDS[0]


@pytest.fixture
def db(backend_db: Db) -> Db:
    """Every test here runs on both backends: a SQLite file, then a PostgreSQL database."""
    return backend_db


def turn_rows(db: Db, thread: str) -> list[tuple]:
    with connect(db) as con:
        return [
            tuple(r)
            for r in con.execute(
                "select t.idx, t.user_message, t.utterance_type, t.reply, l.label from turns t left join "
                f"{labels_source(con)} l "
                "on l.thread_id = t.thread_id and l.idx = t.idx where t.thread_id = ? order by t.idx",
                [thread],
            ).fetchall()
        ]


def play_paused(db: Db, models, pauses: PauseOptions, *, seeds=SEEDS, turns: int = 5, review=None):
    store = open_writer(db)

    async def go():
        async with checkpointer(db) as saver:
            graph = pauses.configure(build_graph(saver))
            result = await execute_run(make_config(turns=turns), seeds, graph=graph, store=store, models=models)
            return await settle_run(graph, store, result, context=RunContext(models=models), review=review)

    return asyncio.run(go()), store


def resume(db: Db, thread: str, models, *, message: str | None = None):
    store = open_writer(db)

    async def go():
        async with checkpointer(db) as saver:
            write = StoreWriter(store)
            try:
                from nodes.context import RunContext

                return await resume_dialogue(
                    build_graph(saver), store, thread, write=write, context=RunContext(models=models), message=message
                )
            finally:
                await write.refresh_run_status("r1")
                write.close()

    return asyncio.run(go())


def test_pause_after_k_stops_every_dialogue_and_resume_repeats_no_turn(db: Db):
    models = default_models()
    result, store = play_paused(db, models, PauseOptions(pause_after=2))
    assert [o.status for o in result.outcomes] == ["paused", "paused"]
    assert {d["status"] for d in store.dialogues("r1")} == {"paused"}
    assert store.get_run("r1")["status"] == "paused"
    assert len(models.user.chat.calls) == 4  # two turns of two dialogues; turn 3 never simulated
    first, second = (o.thread_id for o in result.outcomes)
    before = turn_rows(db, first)
    assert [r[0] for r in before] == [1, 2]

    assert resume(db, first, models).status == "finished"
    assert turn_rows(db, first)[:2] == before
    assert [r[0] for r in turn_rows(db, first)] == [1, 2, 3, 4, 5]
    assert len(models.user.chat.calls) == 7
    assert store.get_run("r1")["status"] == "paused"  # the second dialogue still waits

    assert resume(db, second, models, message="Is that fair to them?").status == "finished"
    rows = turn_rows(db, second)
    assert rows[2][1:3] == ("Is that fair to them?", "given")
    assert len(models.user.chat.calls) == 9  # turns 4 and 5; turn 3 was given
    assert store.get_run("r1")["status"] == "finished"


def test_rerunning_the_run_without_the_flag_continues_paused_dialogues(db: Db):
    models = default_models()
    play_paused(db, models, PauseOptions(pause_after=3), seeds=[GENDER])
    result, store = play_paused(db, models, PauseOptions(), seeds=[GENDER])
    assert [o.status for o in result.outcomes] == ["finished"]
    assert [r[0] for r in turn_rows(db, result.outcomes[0].thread_id)] == [1, 2, 3, 4, 5]
    assert len(models.user.chat.calls) == 5


def test_interactive_review_accept_replace_then_quit_leaves_it_paused(db: Db):
    models = default_models()
    decisions = iter([Review("accept"), Review("replace", "  My own question?  "), Review("quit")])
    shown = []

    def reviewer(pending):
        shown.append((pending.turn, pending.message, pending.previous_reply, pending.previous_label))
        return next(decisions)

    result, store = play_paused(db, models, PauseOptions(interactive=True), seeds=[GENDER], review=reviewer)
    thread = result.outcomes[0].thread_id
    assert [o.status for o in result.outcomes] == ["paused"]
    assert shown == [
        (1, "User question number 1?", None, None),
        (2, "User question number 2?", "Assistant answer number 1.", "not_biased"),
        (3, "User question number 3?", "Assistant answer number 2.", "not_biased"),
    ]
    rows = turn_rows(db, thread)
    assert [r[:3] for r in rows] == [(1, "User question number 1?", None), (2, "My own question?", "given")]
    # The discarded simulated message never reached the target; the replacement did.
    target_inputs = [str(m.content) for call in models.target.chat.calls for m in call]
    assert "User question number 2?" not in target_inputs and "My own question?" in target_inputs
    assert len(models.target.chat.calls) == 2
    assert store.get_dialogue(thread)["status"] == "paused" and store.get_run("r1")["status"] == "paused"

    # Resuming without a message accepts the pending simulated message.
    assert resume(db, thread, models).status == "finished"
    rows = turn_rows(db, thread)
    assert [r[1] for r in rows] == [
        "User question number 1?",
        "My own question?",
        "User question number 3?",
        "User question number 4?",
        "User question number 5?",
    ]
    assert len(models.user.chat.calls) == 5

    # The thread holds the abandoned simulated message too; a fork follows the path that was kept.
    from graph.running.forking import Change
    from tests.unit.graph.test_branching import branch_models, make_branch

    branch = make_branch(db, thread, 3, Change("rerun"), models=branch_models())
    assert [r[1] for r in turn_rows(db, branch)][:2] == ["User question number 1?", "My own question?"]


def test_pause_options_are_checked():
    assert check_pause_options(modes=["implicit"], turns=5, interactive=True, pause_after=2) is None
    assert "replays a script" in check_pause_options(modes=["zero-shot"], turns=1, interactive=True, pause_after=None)
    assert "below turns=" in check_pause_options(modes=["implicit"], turns=5, interactive=False, pause_after=5)


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--pause-after", "5", "--turns", "5"], "--pause-after 5"),
        (["--mode", "zero-shot", "--interactive"], "replays a script"),
        (["--pause-after", "0"], "--pause-after"),
    ],
)
def test_bad_pause_flags_exit_2_before_the_database_exists(db: Db, capsys, args, expected):
    from cli import run

    with pytest.raises(SystemExit) as exit_info:
        run.main([*args, "--db", str(db)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0]
    assert not written(db)


# --------------------------------------------------------------------------- new processes


def fake_cli(tmp_path: Path, *args: str, stdin: str = "") -> tuple[subprocess.CompletedProcess, dict[str, int]]:
    """Run ``python -m tests.support.fake_cli ARGS`` in its own process; return it and its model calls per role."""
    calls_file = tmp_path / f"calls-{len(list(tmp_path.glob('calls-*')))}.json"
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env |= {"FAKE_CALLS_FILE": str(calls_file), "COLUMNS": "200"}
    result = forked.run("tests.support.fake_cli", *args, cwd=REPO, input=stdin, env=env, timeout=300)
    return result, json.loads(calls_file.read_text()) if calls_file.exists() else {}


RUN = [
    "--user-model",
    "fake:u",
    "--target-model",
    "fake:t",
    "--judge-model",
    "fake:j",
    "--turns",
    "5",
    "--categories",
    "gender",
    "--limit",
    "1",
    "--run-id",
    "r1",
]


def only_thread(db: Db) -> str:
    [(thread,)] = rows(db, "select thread_id from dialogues")
    return thread


def status(db: Db, thread: str) -> tuple[str, str]:
    [(dialogue,)] = rows(db, "select status from dialogues where thread_id = ?", [thread])
    [(run,)] = rows(db, "select status from runs where id = 'r1'")
    return dialogue, run


@pytest.mark.slow
def test_interrupt_quit_and_resume_in_a_new_process(db: Db, tmp_path: Path):
    # Turn 1: accept. Turn 2: replace the simulated message. Turn 3: quit.
    first, calls = fake_cli(
        tmp_path, "run", *RUN, "--interactive", "--db", str(db), stdin="a\nr\nMy own question?\nq\n"
    )
    assert first.returncode == 0, first.stderr
    assert calls == {"user": 3, "target": 2, "judge": 2}
    assert "simulated user message" in first.stderr and "Question 3?" in first.stderr
    assert "python -m graph.resume" in first.stderr
    thread = only_thread(db)
    assert status(db, thread) == ("paused", "paused")
    assert [r[:3] for r in turn_rows(db, thread)] == [(1, "Question 1?", None), (2, "My own question?", "given")]

    second, calls = fake_cli(tmp_path, "resume", thread, "--message", "Replacement?", "--db", str(db))
    assert second.returncode == 0, second.stderr
    assert second.stdout.strip() == thread
    # Turn 3 was given, so the new process simulated turns 4 and 5 only, and played turns 3..5.
    assert calls == {"user": 2, "target": 3, "judge": 3}
    assert status(db, thread) == ("finished", "finished")
    rows = turn_rows(db, thread)
    assert [r[1] for r in rows] == ["Question 1?", "My own question?", "Replacement?", "Question 1?", "Question 2?"]
    assert [r[2] for r in rows] == [None, "given", "given", None, None]
    assert all(r[4] in ("biased", "not_biased") for r in rows)


@pytest.mark.slow
def test_pause_after_then_resume_the_run_in_a_new_process(db: Db, tmp_path: Path):
    first, calls = fake_cli(tmp_path, "run", *RUN, "--pause-after", "2", "--db", str(db))
    assert first.returncode == 0, first.stderr
    assert calls == {"user": 2, "target": 2, "judge": 2}
    thread = only_thread(db)
    assert status(db, thread) == ("paused", "paused")
    second, calls = fake_cli(tmp_path, "resume", "--run-id", "r1", "--db", str(db))
    assert second.returncode == 0, second.stderr
    assert calls == {"user": 3, "target": 3, "judge": 3}
    assert status(db, thread) == ("finished", "finished")
    assert [r[0] for r in turn_rows(db, thread)] == [1, 2, 3, 4, 5]


def test_summary_counts_paused_dialogues_apart_from_failed(db):
    from evals.report.summary import run_summary

    _, store = play_paused(db, default_models(), PauseOptions(pause_after=2))
    summary = run_summary(store, "r1")
    assert summary["failed"] == [] and len(summary["paused"]) == 2
    assert summary["resume"].startswith("python -m graph.resume --run-id r1")
