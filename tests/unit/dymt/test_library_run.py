"""``dymt.run`` / ``dymt.arun``: the library call the ``graph.run`` command makes, its typed result and its events.

Runs play against a real stub OpenAI-compatible server (tests/support/stub_server.py) in every role.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import dymt
from dymt.events import Collector, DialogueProgress, RunEnded, RunStarted
from tests.support.stub_server import StubServer

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.slow  # whole runs against a real stub server process, several seconds each


def _options(stub: StubServer, db: Path, run_id: str) -> dict:
    return dict(
        db=str(db),
        run_id=run_id,
        user_model="openai:u",
        judge_model="openai:j",
        target_model=["openai:t"],
        base_url=stub.url,
        turns=2,
        categories=["gender", "age"],
        max_concurrency=1,
    )


def _check_own_events(collector: Collector, run_id: str, dialogues: int, turns: int) -> None:
    started = collector.of(RunStarted)
    assert [s.run_id for s in started] == [run_id] and started[0].dialogues == dialogues and started[0].turns == turns
    progress = collector.of(DialogueProgress)
    assert progress and all(e.run_id == run_id and e.thread_id.startswith(f"{run_id}:") for e in progress)
    assert sum(e.event == "finished" for e in progress) == dialogues
    assert max(e.turns_done for e in progress) == turns
    assert collector.events[0] is started[0]  # RunStarted comes before any progress


def test_two_runs_on_one_event_loop_play_at_once_and_keep_their_events_apart(tmp_path: Path) -> None:
    with StubServer(latency=0.15) as stub:
        first, second = Collector(), Collector()

        async def both():
            return await asyncio.gather(
                dymt.arun(**_options(stub, tmp_path / "a.db", "alpha"), on_event=first),
                dymt.arun(**_options(stub, tmp_path / "b.db", "beta"), on_event=second),
            )

        a, b = asyncio.run(both())
        overlapped = stub.max_in_flight
    for result, collector, run_id in ((a, first, "alpha"), (b, second, "beta")):
        assert isinstance(result, dymt.RunResult)
        assert result.run_id == run_id and result.ended == "finished", result.summary.get("failed")
        assert result.summary["finished"] == 2 and result.summary["dialogues"] == 2
        assert result.to_json()["schema"] == dymt.RUN_SCHEMA and result.to_json()["run_id"] == run_id
        _check_own_events(collector, run_id, dialogues=2, turns=2)
    assert overlapped >= 2  # each run plays one dialogue at a time: two calls in flight means both ran at once


def test_two_runs_in_two_threads_keep_their_results_and_events_apart(tmp_path: Path, capsys) -> None:
    results: dict[str, dymt.RunResult] = {}
    collectors = {"left": Collector(), "right": Collector()}
    with StubServer(latency=0.1) as stub:

        def play(run_id: str) -> None:
            results[run_id] = dymt.run(**_options(stub, tmp_path / f"{run_id}.db", run_id), on_event=collectors[run_id])

        threads = [threading.Thread(target=play, args=(name,)) for name in collectors]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    for run_id, collector in collectors.items():
        assert results[run_id].ended == "finished" and results[run_id].summary["finished"] == 2
        _check_own_events(collector, run_id, dialogues=2, turns=2)
    out, err = capsys.readouterr()
    assert out == "" and err == ""  # the library prints nothing: what it says goes to the events


def test_bad_input_raises_one_line_and_writes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "never.db"
    with pytest.raises(dymt.DymtError, match="unknown option 'turn'"):
        dymt.run(db=str(db), turn=3)
    with pytest.raises(dymt.DymtError, match="turns="):
        dymt.run(db=str(db), turns=0)
    with pytest.raises(dymt.DymtError, match="max_cost= needs pricing=FILE"):
        dymt.run(db=str(db), max_cost=1.0)
    assert not db.exists()


def test_the_commands_json_is_the_results_json(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    with StubServer() as stub:
        first = dymt.run(**_options(stub, db, "same"))
        flags = ["--db", str(db), "--run-id", "same", "--json"]
        shown = subprocess.run(
            [sys.executable, "-m", "graph.run", *flags], cwd=ROOT, capture_output=True, text=True, timeout=120
        )
    assert shown.returncode == 0, shown.stderr[-2000:]
    again = dymt.run(db=str(db), run_id="same")  # a finished run given again: its summary, nothing played
    assert json.loads(shown.stdout) == again.to_json()
    assert again.summary["skipped_this_time"] == 2 and first.summary["cumulative"] == again.summary["cumulative"]


def test_astream_yields_the_runs_events_in_order_and_ends_with_its_result(tmp_path: Path) -> None:
    async def collect() -> list:
        return [event async for event in dymt.astream(**_options(stub, tmp_path / "s.db", "streamed"))]

    with StubServer() as stub:
        events = asyncio.run(collect())
    assert isinstance(events[0], RunStarted) and isinstance(events[-1], RunEnded)
    result = events[-1].result
    assert result.ended == "finished" and result.summary["finished"] == 2
    finished = [e.thread_id for e in events if isinstance(e, DialogueProgress) and e.event == "finished"]
    assert len(set(finished)) == 2 and all(t.startswith("streamed:") for t in finished)
    done: dict[str, int] = {}
    for event in events[1:-1]:  # each dialogue's stored turns only go up, one event at a time
        assert event.turns_done >= done.get(event.thread_id, 0)
        done[event.thread_id] = event.turns_done
    assert set(done.values()) == {2}
