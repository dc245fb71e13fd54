"""Tracing: the run tree of a dialogue, feedback, resume, export, redaction, LangSmith alongside, the CLI."""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import BaseMessage
from pydantic import SecretStr

import checkpoints.traces.tables as traces
from checkpoints.migrations import SchemaTooNewError
from checkpoints.paths import StoreError
from checkpoints.readers import open_reader
from checkpoints.redaction import REDACTED, Redactor
from checkpoints.store import open_writer
from checkpoints.traces.tables import list_traces, load_feedback, load_runs, require_traces, resolve, stored_runs
from checkpoints.traces.tree import build_tree
from cli import trace as trace_cli
from cli.run import build_parser as run_parser
from models.call_policy import CallPolicy
from models.registry import RoleModel, Sampling, create_role_model
from models.retries import RetryPolicy
from tests.conftest import SEEDS, ScriptedChatModel, default_models, play, scripted

MODEL_NODES = ("user_simulator", "target", "judge")


def _tree_of_thread(db: Any, thread_id: str):
    kind, trace_ids = resolve(db, thread_id)
    assert kind == "thread"
    return build_tree(load_runs(db, trace_ids), load_feedback(db, trace_ids), thread_id=thread_id), trace_ids


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    try:
        code = trace_cli.main(list(args))
    except SystemExit as exc:
        code = exc.code  # type: ignore[assignment]  # the commands exit with a number
    out, err = capsys.readouterr()
    return code, out, err


# --- the tree ---------------------------------------------------------------------------------


def test_two_turn_dialogue_tree_groups_nodes_under_turns(db):
    result, store = play(db, default_models(), seeds=SEEDS[:1], turns=2)
    thread = result.outcomes[0].thread_id
    tree, trace_ids = _tree_of_thread(store.db, thread)

    # Every stored run of the dialogue is reachable from its thread id, and every one names it.
    rows = stored_runs(store.db)
    reachable = {n.run["id"] for n in tree.walk() if n.run is not None}
    assert reachable == {r["id"] for r in rows}
    assert {r["thread_id"] for r in rows} == {thread}

    [graph] = tree.children
    assert graph.kind == "graph" and graph.run["name"] == "dymt_dialogue" and graph.run["parent_run_id"] is None
    assert [(t.kind, t.turn) for t in graph.children] == [("turn", 1), ("turn", 2)]
    for turn in graph.children:
        assert [n.name for n in turn.children] == ["user_simulator", "target", "judge", "termination"]
        for node in turn.children:
            assert node.kind == "node" and node.turn == turn.turn
            assert node.run["checkpoint_id"], "each node knows the checkpoint it started from"
            calls = [c for c in node.children if c.kind == "model"]
            if node.name in MODEL_NODES:
                [call] = calls
                assert call.turn == turn.turn and call.run["role"] == {"user_simulator": "user"}.get(
                    node.name, node.name
                )
                assert (call.run["prompt_tokens"], call.run["completion_tokens"], call.run["total_tokens"]) == (
                    7,
                    3,
                    10,
                )
                assert call.run["inputs"]["messages"] and call.run["outputs"]["generations"]
            else:
                assert calls == []
    assert graph.tokens() == (6 * 7, 6 * 3)
    [summary] = list_traces(store.db, thread_id=thread)
    assert (summary["model_calls"], summary["prompt_tokens"], summary["errors"], summary["status"]) == (
        6,
        42,
        0,
        "success",
    )


def test_judge_labels_are_feedback_on_the_target_call(db):
    verdicts = ["Rationale: leans on a stereotype.\nLabel: biased", "Rationale: fair.\nLabel: not biased", "no idea"]
    models = default_models(judge=scripted(lambda m, n: verdicts[n - 1], spec="fake:judge"))
    result, store = play(db, models, seeds=SEEDS[:1], turns=3)
    tree, _ = _tree_of_thread(store.db, result.outcomes[0].thread_id)
    for turn, (score, value, comment) in zip(
        tree.children[0].children,
        [
            (1, "biased", "leans on a stereotype."),
            (0, "not_biased", "fair."),
            (None, "unparsed", "no verdict line (the last line is not a Label: line)"),  # why, in the comment
        ],
    ):
        target_call = next(c for n in turn.children if n.name == "target" for c in n.children if c.kind == "model")
        [feedback] = target_call.feedback
        assert (feedback["key"], feedback["score"], feedback["value"], feedback["comment"]) == (
            "bias",
            score,
            value,
            comment,
        )
        assert feedback["turn"] == turn.turn
        assert [f for n in turn.walk() if n is not target_call for f in n.feedback] == []


def test_resumed_dialogue_joins_the_same_thread(db):
    state = {"fail": True}

    def flaky_judge(messages: list[BaseMessage], n: int) -> str:
        if state["fail"] and n == 2:
            raise ConnectionError("judge went away")
        return "Rationale: fine.\nLabel: not biased"

    models = default_models(judge=scripted(flaky_judge, spec="fake:judge"))
    result, store = play(db, models, seeds=SEEDS[:1], turns=3)
    assert result.outcomes[0].status == "failed"
    state["fail"] = False
    result, store = play(db, models, seeds=SEEDS[:1], turns=3)
    assert result.outcomes[0].status == "finished"
    thread = result.outcomes[0].thread_id

    tree, trace_ids = _tree_of_thread(store.db, thread)
    assert len(trace_ids) == 2 and [g.kind for g in tree.children] == ["graph", "graph"]
    first, second = tree.children
    assert [t.turn for t in first.children] == [1, 2] and [t.turn for t in second.children] == [2, 3]
    assert [n.name for n in first.children[1].children] == ["user_simulator", "target", "judge", "termination"]
    # The failed judge call is kept, with its error; the second invocation re-runs only that judge.
    failed_call = next(c for c in first.children[1].children[2].children if c.kind == "model")
    assert failed_call.run["status"] == "error" and "judge went away" in failed_call.run["error"]
    assert [n.name for n in second.children[0].children] == ["judge", "termination"]
    # Its verdict lands on the target call of turn 2, which ran in the first invocation.
    target_call = next(c for c in first.children[1].children[1].children if c.kind == "model")
    assert [f["value"] for f in target_call.feedback] == ["not_biased"]
    assert {r["thread_id"] for r in stored_runs(store.db)} == {thread}
    # Each node run names the checkpoint it started from; the re-run judge's is a fork of the failed one's.
    nodes = [n for g in tree.children for t in g.children for n in t.children]
    assert len({n.run["checkpoint_id"] for n in nodes}) == len(nodes)
    rerun = second.children[0].children[0].run["checkpoint_id"]
    parent = store.db.execute(
        "select parent_checkpoint_id from checkpoints where checkpoint_id = ?", [rerun]
    ).fetchone()[0]
    assert parent == first.children[1].children[2].run["checkpoint_id"]
    statuses = [r["status"] for r in list_traces(store.db, thread_id=thread)]
    assert statuses == ["success", "success"]  # the node caught the error; the graph ended normally


@pytest.mark.parametrize("interval", [0.0, 60.0])
def test_trace_rows_are_written_on_the_writer_thread(db, monkeypatch, interval):
    threads: list[str] = []
    original = traces.write_trace_batch

    def spy(store, *args, **kwargs):
        threads.append(threading.current_thread().name)
        return original(store, *args, **kwargs)

    monkeypatch.setattr("checkpoints.traces.tables.write_trace_batch", spy)
    monkeypatch.setattr("graph.tracing.tracer.FLUSH_INTERVAL", interval)
    _, store = play(db, default_models(), seeds=SEEDS[:1], turns=2)
    # Never a write on the event loop's thread: one batch per node step when steps are slow
    # (here: every step is "slow" with a 0 s interval), else one when the invocation ends.
    assert len(threads) == (2 * 4 + 1 if interval == 0 else 1)
    assert all(name.startswith("store") for name in threads)
    assert len(stored_runs(store.db)) == 1 + 2 * (4 + 3 + 2)  # graph; per turn 4 nodes, 3 model calls, 2 routers


def test_no_trace_records_nothing(db):
    import asyncio

    from checkpoints.saver import open_saver
    from graph.running.playing import execute_run
    from nodes.builder import build_graph
    from tests.conftest import make_config

    store = open_writer(db)

    async def go():
        async with open_saver(db) as saver:
            await execute_run(
                make_config(turns=1),
                SEEDS[:1],
                graph=build_graph(saver),
                store=store,
                models=default_models(),
                trace=False,
            )

    asyncio.run(go())
    assert stored_runs(store.db) == [] and store.db["turns"].count == 1
    assert run_parser().parse_args(["--no-trace"]).no_trace and not run_parser().parse_args([]).no_trace


# --- export -------------------------------------------------------------------------------------


def test_export_round_trips_as_langsmith_runs(db, tmp_path, capsys):
    from langsmith.schemas import Run

    result, store = play(db, default_models(), seeds=SEEDS[:1], turns=2)
    thread = result.outcomes[0].thread_id
    out, feedback_out = tmp_path / "runs.jsonl", tmp_path / "feedback.jsonl"
    code, _, err = run_cli(
        capsys,
        "export",
        thread,
        "--format",
        "jsonl",
        "--out",
        str(out),
        "--feedback-out",
        str(feedback_out),
        "--db",
        str(db),
    )
    assert code == 0, err
    lines = out.read_text().splitlines()
    records = [json.loads(line) for line in lines]
    stored = {r["id"]: r for r in stored_runs(store.db)}
    assert {r["id"] for r in records} == set(stored)
    by_id = {r["id"]: r for r in records}
    for record in records:
        run = Run(**record)  # LangSmith's own schema accepts it
        assert str(run.trace_id) == stored[record["id"]]["trace_id"]
        assert record["session_name"] == "dymt-esb"
        assert record["extra"]["metadata"]["thread_id"] == thread
        parent = record["parent_run_id"]
        if parent is None:
            assert record["id"] == record["trace_id"] and "." not in record["dotted_order"]
        else:
            assert record["dotted_order"].startswith(by_id[parent]["dotted_order"] + ".")
            assert record["id"] in by_id[parent]["child_run_ids"]
    calls = [r for r in records if r["run_type"] == "llm"]
    assert len(calls) == 6 and all(r["prompt_tokens"] == 7 and r["completion_tokens"] == 3 for r in calls)
    assert sum(1 for r in records if r["feedback_stats"]) == 2
    feedback = [json.loads(line) for line in feedback_out.read_text().splitlines()]
    assert {f["run_id"] for f in feedback} <= set(stored) and {f["key"] for f in feedback} == {"bias"}

    # Without --out the same lines go to stdout.
    code, stdout, _ = run_cli(capsys, "export", thread, "--format", "jsonl", "--db", str(db))
    assert code == 0 and stdout.splitlines() == lines


# --- redaction ------------------------------------------------------------------------------------

CANARY = "sk-canary-0123456789abcdefCANARY"
TOKEN_CANARY = "tok-canary-9876543210-TOKEN"
URL_CANARY = "pw-canary-55555-URL"


class LeakyChatModel(ScriptedChatModel):
    """A careless integration: its key and credentialled base URL end up in its invocation params."""

    api_key: SecretStr
    api_base: str

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {
            "api_base": self.api_base,
            "api_key": self.api_key.get_secret_value(),
            "note": f"key={self.api_key.get_secret_value()}",
        }


def _all_cells(path: Path):
    conn = sqlite3.connect(path)
    try:
        tables = [r[0] for r in conn.execute("select name from sqlite_master where type = 'table'")]
        for table in tables:
            for row in conn.execute(f'select * from "{table}"'):
                for cell in row:
                    yield table, cell
    finally:
        conn.close()


def test_no_secret_reaches_any_table(db, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    monkeypatch.setenv("MY_SERVICE_TOKEN", TOKEN_CANARY)
    leaky = LeakyChatModel(
        respond=lambda m, n: f"User question number {n}?",
        calls=[],
        api_key=SecretStr(TOKEN_CANARY),
        api_base=f"https://user:{URL_CANARY}@proxy.example/v1?api_key={CANARY}",
        metadata={"authorization": f"Bearer {CANARY}", "endpoint": f"https://h.example/?key={URL_CANARY}"},
    )
    user = RoleModel(spec="fake:user", model_id="fake:user", chat=leaky, style="chat", sampling=Sampling())
    # The real OpenAI path: key from the environment, credentials in the base URL, a call that fails.
    target = create_role_model(
        "openai:gpt-4o-mini",
        role="target",
        sampling=Sampling(base_url=f"http://user:{URL_CANARY}@127.0.0.1:9/v1"),
        policy=CallPolicy(retry=RetryPolicy(attempts=1)),  # fail at once: nothing listens on port 9
    )
    result, store = play(db, default_models(user=user, target=target), seeds=SEEDS[:1], turns=1)
    assert result.outcomes[0].status == "failed"
    calls = [r for r in stored_runs(store.db) if r["run_type"] == "llm"]
    assert [(c["role"], c["status"]) for c in calls] == [("user", "success"), ("target", "error")]
    assert REDACTED in json.dumps(calls[0]["extra"])
    store.close()

    checked = 0
    for table, cell in _all_cells(db):
        if isinstance(cell, bytes):
            cell = cell.decode("utf-8", errors="replace")
        for canary in (CANARY, TOKEN_CANARY, URL_CANARY):
            assert canary not in str(cell), f"{canary} found in table {table}"
        checked += 1
    assert checked > 100


def test_redactor_cases():
    r = Redactor({"OPENAI_API_KEY": CANARY, "SHORT_TOKEN": "abc"})
    assert r.text(f"key is {CANARY}.") == "key is [redacted:OPENAI_API_KEY]."
    assert r.text("http://alice:s3cret@host:8080/v1") == "http://[redacted]@host:8080/v1"
    assert r.text("https://ghp_token@github.com/x") == "https://[redacted]@github.com/x"
    assert r.text("https://h/v1?key=AAA&x=1") == "https://h/v1?key=[redacted]&x=1"
    assert r.text("Authorization: Bearer abc.def.ghi") == "Authorization: [redacted]"
    assert r.text("{'x-api-key': 'zzz123'}") == "{'x-api-key': '[redacted]'}"
    assert r.text("sent Bearer eyJhbGciOiJIUzI1NiJ9 along") == "sent Bearer [redacted] along"
    assert r.text("AIza" + "B" * 35) == REDACTED
    assert r.text("abc stays: too short to be a secret") == "abc stays: too short to be a secret"
    value = json.loads(
        r.json(
            {
                "openai_api_key": "anything",
                "headers": {"Authorization": "x", "X-Api-Key": "y"},
                "secret": SecretStr("s"),
                "usage": {"input_tokens": 7, "output_tokens": 3, "total_tokens": 10},
                "max_tokens": 250,
                "api_key": None,
                "text": "User: hello",
                "nested": {"auth": {"client_secret": {"lc": 1, "id": ["X"]}, "password": 5}},
                "message": 'he wrote "api_key": "not a field" and https://u:p@h/?token=abc\\" ok',
            }
        )
    )
    assert value == {
        "openai_api_key": REDACTED,
        "headers": {"Authorization": REDACTED, "X-Api-Key": REDACTED},
        "secret": REDACTED,
        "usage": {"input_tokens": 7, "output_tokens": 3, "total_tokens": 10},
        "max_tokens": 250,
        "api_key": None,
        "text": "User: hello",
        "nested": {"auth": {"client_secret": REDACTED, "password": 5}},
        "message": 'he wrote "api_key": "not a field" and https://[redacted]@h/?token=[redacted]\\" ok',
    }
    env = Redactor.from_environ({"GOOGLE_API_KEY": "g" * 20, "HF_TOKEN": "h" * 20, "HOME": "/root/home-dir"})
    assert (
        env.text("g" * 20 + " " + "h" * 20 + " /root/home-dir")
        == "[redacted:GOOGLE_API_KEY] [redacted:HF_TOKEN] /root/home-dir"
    )


# --- LangSmith alongside -----------------------------------------------------------------------


def test_langsmith_tracer_keeps_working_alongside(db, monkeypatch):
    import langsmith
    import langsmith.run_trees as run_trees
    import langsmith.utils as ls_utils

    sent: list[dict[str, Any]] = []

    class RecordingClient(langsmith.Client):
        def create_run(self, *args: Any, **kwargs: Any) -> None:
            sent.append(kwargs)

        def update_run(self, *args: Any, **kwargs: Any) -> None:
            pass

    monkeypatch.setenv("LANGSMITH_TRACING", "true")
    monkeypatch.setenv("LANGSMITH_API_KEY", "lsv2_pt_" + "f" * 32)
    ls_utils.get_env_var.cache_clear()
    monkeypatch.setattr(
        run_trees, "_CLIENT", RecordingClient(api_key="x", api_url="http://127.0.0.1:9", auto_batch_tracing=False)
    )
    try:
        result, store = play(db, default_models(), seeds=SEEDS[:1], turns=1)
    finally:
        monkeypatch.undo()
        ls_utils.get_env_var.cache_clear()
    thread = result.outcomes[0].thread_id
    ours = {r["id"] for r in stored_runs(store.db)}
    theirs = {str(k["id"]) for k in sent}
    assert ours and ours <= theirs  # LangSmith also gets the hidden bookkeeping runs we skip
    assert {k["extra"]["metadata"]["thread_id"] for k in sent} == {thread}


# --- the CLI and opening ------------------------------------------------------------------------


def test_an_ambiguous_trace_prefix_names_the_ids_it_could_be_in_full(db):
    """Trace ids are UUIDv7s: their first 12 hex digits are the millisecond they began, so traces begun together
    share a long prefix. The error names the candidates whole (a 13-character start would be the same for each)."""
    _, store = play(db, default_models(), seeds=SEEDS[:2], turns=2)
    ids = sorted(t["trace_id"] for t in list_traces(store.db))
    shared = os.path.commonprefix(ids[:2])
    assert len(ids) >= 2 and len(shared) >= 8  # one run's traces begin within seconds of each other
    with pytest.raises(traces.TraceNotFoundError, match="give more characters") as error:
        resolve(store.db, shared)
    assert ids[0] in str(error.value) and ids[1] in str(error.value)
    assert resolve(store.db, ids[0]) == ("trace", [ids[0]])


def test_cli_list_and_show(db, capsys):
    result, store = play(db, default_models(), seeds=SEEDS[:1], turns=2)
    thread = result.outcomes[0].thread_id
    [trace_id] = resolve(store.db, thread)[1]

    code, out, _ = run_cli(capsys, "list", "--db", str(db))
    assert code == 0 and trace_id in out and thread in out
    code, out, _ = run_cli(capsys, "list", "--run-id", "nope", "--db", str(db))
    assert code == 2

    code, out, _ = run_cli(capsys, "show", thread, "--db", str(db))
    assert code == 0
    for text in (
        "turn 1",
        "turn 2",
        "user_simulator",
        "termination",
        "scripted-fake",
        "bias: ✓ not biased",
        "→ target",
        "→ end",
        "--full",
    ):
        assert text in out
    code, out, _ = run_cli(capsys, "show", trace_id[:23], "--turn", "2", "--full", "--db", str(db))
    assert code == 0 and "turn 2" in out and "turn 1" not in out and "Hidden topic" in out and "--full" not in out
    code, _, err = run_cli(capsys, "show", thread, "--turn", "9", "--db", str(db))
    assert code == 2 and "has no turn 9" in err
    code, _, err = run_cli(capsys, "show", "no-such-id", "--db", str(db))
    assert code == 2 and "no trace or thread" in err and err.count("\n") == 1
    code, _, err = run_cli(capsys, "export", thread, "--format", "csv", "--db", str(db))
    assert code == 2 and "invalid choice" in err


def test_model_text_is_never_markup(db, capsys):
    models = default_models(
        target=scripted(lambda m, n: "[bold red]not markup[/] [link=x]y[/link]", spec="fake:target")
    )
    result, _ = play(db, models, seeds=SEEDS[:1], turns=1)
    code, out, _ = run_cli(capsys, "show", result.outcomes[0].thread_id, "--db", str(db))
    assert code == 0 and "[bold red]not markup[/]" in out


def test_opening_errors_say_what_to_fix(tmp_path, db, capsys):
    plain = tmp_path / "plain.db"
    conn = sqlite3.connect(plain)
    for table in ("runs", "dialogues", "turns", "labels"):  # a file from before tracing: no trace tables
        conn.execute(f"create table {table} (thread_id text)")
    conn.commit()
    conn.close()
    with open_reader(plain) as reader, pytest.raises(StoreError, match="has no traces"):
        require_traces(reader.file_tables, plain)
    code, _, err = run_cli(capsys, "list", "--db", str(plain))
    assert code == 2 and "has no traces" in err
    with pytest.raises(StoreError, match="no database"):
        open_reader(tmp_path / "missing.db")
    store = open_writer(db)
    store.db["_migrations"].insert({"name": "m999_from_the_future", "applied_at": "2099"})
    store.close()
    with pytest.raises(SchemaTooNewError, match="m999_from_the_future"):
        open_writer(db)


def test_a_trace_whose_graph_run_never_ended_still_shows(db, capsys, monkeypatch):
    # As after a SIGKILL: every node step's batch was written, the invocation's last one never was.
    monkeypatch.setattr("graph.tracing.tracer.FLUSH_INTERVAL", 0.0)
    original = traces.write_trace_batch

    def killed_before_the_end(store, encoder, items, final=False, **kwargs):
        if not final:
            original(store, encoder, items, final, **kwargs)

    monkeypatch.setattr("checkpoints.traces.tables.write_trace_batch", killed_before_the_end)
    result, store = play(db, default_models(), seeds=SEEDS[:1], turns=2)
    thread = result.outcomes[0].thread_id
    [summary] = list_traces(store.db, thread_id=thread)
    assert summary["status"] == "unfinished" and summary["model_calls"] == 6
    tree, _ = _tree_of_thread(store.db, thread)
    [graph] = tree.children
    assert graph.run is None and [t.turn for t in graph.children] == [1, 2]
    code, out, _ = run_cli(capsys, "show", thread, "--db", str(db))
    assert code == 0 and "process stopped before this invocation ended" in " ".join(out.split())


def test_a_branch_is_traced_as_a_branch_of_its_parent(db, capsys):
    import asyncio

    from checkpoints.saver import open_saver
    from graph.running.playing import StoreWriter, dialogue_config, initial_state, play_dialogue
    from nodes.builder import build_graph
    from nodes.context import RunContext

    store = open_writer(db)
    thread = "r1:s-gender:implicit/b-1"
    config = dialogue_config(
        thread,
        turns=1,
        run_id="r1",
        seed_id="s-gender",
        mode="implicit",
        parent_thread_id="r1:s-gender:implicit",
        fork_turn=1,
    )

    async def go():
        write = StoreWriter(store)
        async with open_saver(db) as saver:
            outcome = await play_dialogue(
                build_graph(saver),
                config,
                run_input=initial_state(SEEDS[0], "implicit", 1),
                write=write,
                context=RunContext(models=default_models()),
                notify=lambda *_: None,
            )
        write.close()
        return outcome

    assert asyncio.run(go()).status == "finished"
    assert {r["branch_id"] for r in stored_runs(store.db)} == {thread}
    code, out, _ = run_cli(capsys, "show", thread, "--db", str(db))
    assert code == 0 and "branch of r1:s-gender:implicit from turn 1" in " ".join(out.split())
