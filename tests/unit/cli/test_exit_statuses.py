"""Exit statuses scripts can trust (docs/outages.md): 0 all finished, 1 some failed, 2 bad input, 75 an outage past its
budget.

graph.run in-process with fake providers here; 75 from real processes in test_provider_outage.py and
test_store_full_disk.py; graph.run --wait on a real PostgreSQL server at the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from cli.exit_codes import EXIT_BAD_INPUT, EXIT_OK, EXIT_OUTAGE, EXIT_SOME_FAILED
from cli.run import main as run_main
from cli.run_outcome import exit_status, resume_command
from tests.conftest import ScriptedChatModel
from tests.support import forked
from tests.support.stub_server import StubServer

ROOT = Path(__file__).resolve().parents[3]
BROKEN: set[str] = set()  # seed statements whose user-simulator call fails (a non-retryable error)


def _register(providers) -> None:
    def factory(name, role, sampling):
        def user(messages, n):
            if any(statement in str(m.content) for m in messages for statement in BROKEN):
                raise ValueError("the provider refused the request (a 400, say)")
            return f"Question {n}?"

        replies = {
            "user": user,
            "target": lambda m, n: f"Answer {n}.",
            "judge": lambda m, n: "Rationale: r.\nLabel: not biased",
        }
        return ScriptedChatModel(respond=replies[role], calls=[]), f"xfake:{name}", "chat"

    providers("xfake", factory)


ARGS = [
    "--user-model",
    "xfake:u",
    "--judge-model",
    "xfake:j",
    "--target-model",
    "xfake:t",
    "--turns",
    "2",
    "--categories",
    "gender",
    "age",
    "--no-trace",
    "--json",
]


def test_the_statuses_have_their_documented_values():
    assert (EXIT_OK, EXIT_SOME_FAILED, EXIT_BAD_INPUT, EXIT_OUTAGE) == (0, 1, 2, 75)
    assert exit_status({"failed": []}) == 0 and exit_status({"failed": [{"thread_id": "t"}]}) == 1
    assert exit_status({"failed": [], "budget": {"held": 2}}) == 1  # held back by --max-cost: not finished
    assert exit_status({"failed": []}, outages_past_budget=True) == 75


def test_resume_command_is_the_command_given_with_its_run_id():
    assert resume_command(["--turns", "2"], "r-1") == "python -m graph.run --turns 2 --run-id r-1"
    assert (
        resume_command(["--run-id", "mine", "--db", "a b.db"], "mine")
        == "python -m graph.run --run-id mine --db 'a b.db'"
    )


def test_graph_run_exits_1_when_a_dialogue_failed_and_0_once_the_printed_command_finished_it(
    tmp_path: Path, providers, capsys
):
    from seeds import load_seeds

    _register(providers)
    db = tmp_path / "d.db"
    gender = next(s for s in load_seeds("builtin", per_category=1) if s.category == "gender")
    BROKEN.add(gender.statement[:40])
    try:
        # No --run-id given: the resume command adds the generated one.
        assert run_main([*ARGS, "--db", str(db)]) == EXIT_SOME_FAILED
    finally:
        BROKEN.clear()
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert (summary["dialogues"], summary["finished"], len(summary["failed"])) == (2, 1, 1)
    resume = summary["resume"]
    assert resume == f"python -m graph.run {' '.join(ARGS)} --db {db} --run-id {summary['run_id']}"
    assert f"1 of 2 dialogue(s) did not finish. Resume with: {resume}" in " ".join(captured.err.split())
    assert run_main(resume.split()[3:]) == EXIT_OK
    again = json.loads(capsys.readouterr().out)
    assert again["finished"] == 2 and again["failed"] == [] and "resume" not in again


@pytest.mark.parametrize("bad", [["--turns", "0"], ["--mode", "nonsense"], ["--outage-budget", "soon"]])
def test_bad_input_exits_2_in_one_line(tmp_path: Path, providers, capsys, bad):
    _register(providers)
    with pytest.raises(SystemExit) as caught:
        run_main([*ARGS, "--db", str(tmp_path / "d.db"), *bad])
    assert caught.value.code == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "d.db").exists()  # nothing half-written


@pytest.mark.slow
def test_wait_exits_1_counting_jobs_that_failed_before_their_dialogue_started(pg_url: str, capsys):
    """A run whose stored model cannot be built: every job fails before its dialogue starts; --wait says so and exits
    1."""
    with StubServer() as stub:
        flags = [
            "--db",
            pg_url,
            "--run-id",
            "r1",
            "--user-model",
            "openai:u",
            "--judge-model",
            "openai:j",
            "--target-model",
            "openai:t",
            "--base-url",
            stub.url,
            "--turns",
            "2",
            "--limit",
            "2",
            "--no-trace",
        ]
        assert run_main([*flags, "--enqueue"]) == EXIT_OK
        capsys.readouterr()
        with psycopg.connect(pg_url) as conn:  # the run's judge becomes a spec no worker can build
            conn.execute(
                "UPDATE runs SET config = jsonb_set(config::jsonb, '{run_config,models,judge}', "
                "'\"nosuch:judge\"')::text "
                "WHERE id = 'r1'"
            )
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        worker = forked.run("graph.worker", "--db", pg_url, "--drain", env=env, cwd=ROOT, timeout=120)
        assert worker.returncode == 0, worker.stderr[-2000:]
        # the id alone: the stored settings (the stored judge differs from the flags' now)
        assert run_main(["--db", pg_url, "--run-id", "r1", "--wait", "--json"]) == EXIT_SOME_FAILED
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert summary["jobs_failed"] == 2 and summary["dialogues"] == 2 and len(summary["failed"]) == 2
    assert all("failed before the dialogue started" in f["error"] for f in summary["failed"])
    assert "2 of 2 dialogue(s) did not finish. Resume with: python -m graph.run " in " ".join(captured.err.split())


def test_a_cost_cap_from_the_experiment_file_is_not_dropped_by_enqueue(tmp_path: Path, capsys):
    """max_cost from an experiment file is read like the flag: without --pricing the enqueue is refused in one line."""
    config = tmp_path / "run.toml"
    config.write_text("max_cost = 5\n")
    with pytest.raises(SystemExit) as caught:
        run_main(["--config", str(config), "--db", "postgresql://nobody@127.0.0.1:1/x", "--run-id", "r1", "--enqueue"])
    assert caught.value.code == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.startswith("error: --max-cost needs --pricing FILE") and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_a_cost_cap_holds_for_an_enqueued_run_as_its_total_across_workers(pg_url: str, tmp_path: Path, capsys):
    """--max-cost with --enqueue: two workers start no new dialogue once the run's stored total passes the cap; --wait
    exits 1 with the held-back count; enqueuing again with a higher cap plays the rest."""
    pricing = tmp_path / "prices.toml"
    pricing.write_text(
        "".join(f'["openai:{r}"]\ninput = 1000\noutput = 1000\n' for r in "ujt")
    )  # about $1 a dialogue: over the cap after its first turn
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with StubServer() as stub:
        flags = [
            "--db",
            pg_url,
            "--run-id",
            "capped",
            "--user-model",
            "openai:u",
            "--judge-model",
            "openai:j",
            "--target-model",
            "openai:t",
            "--base-url",
            stub.url,
            "--turns",
            "2",
            "--per-category",
            "1",
            "--no-trace",
            "--pricing",
            str(pricing),
        ]
        assert run_main([*flags, "--max-cost", "0.0001", "--enqueue"]) == EXIT_OK
        workers = [
            forked.popen("graph.worker", "--db", pg_url, "--drain", "--concurrency", "1", env=env, cwd=ROOT)
            for _ in range(2)
        ]
        for worker in workers:
            assert worker.wait(timeout=180) == 0, worker.stderr.read()[-2000:]
        capsys.readouterr()
        assert run_main([*flags, "--wait", "--json"]) == EXIT_SOME_FAILED
        first = json.loads(capsys.readouterr().out)
        # The first dialogue plays alone (no dialogue's cost known yet); the other worker waits for it, and after it
        # the run is over the cap: the rest are held. The summary says it in dollars.
        assert first["finished"] == 1 and first["failed"] == []
        assert (
            first["budget"]["max_usd"] == 0.0001
            and first["budget"]["spent_usd"] > 0
            and first["budget"]["reserved_usd"] == 0
        )
        assert first["budget"]["held"] == 6 - first["finished"] and first["dialogues"] == 6
        assert first["resume"].endswith("--max-cost 0.0002")  # twice the cap: runs as printed
        with psycopg.connect(pg_url) as conn:
            assert (
                conn.execute("SELECT count(*) FROM dialogues WHERE run_id = 'capped'").fetchone()[0]
                == first["finished"]
            )
        assert run_main([*flags, "--max-cost", "1000", "--enqueue"]) == EXIT_OK
        drained = forked.run("graph.worker", "--db", pg_url, "--drain", env=env, cwd=ROOT, timeout=180)
        assert drained.returncode == 0, drained.stderr[-2000:]
        capsys.readouterr()
        assert run_main([*flags, "--wait", "--json"]) == EXIT_OK
    final = json.loads(capsys.readouterr().out)
    assert (
        final["finished"] == final["dialogues"] == 6
        and final["failed"] == []
        and not (final["budget"] or {}).get("held")
    )


@pytest.mark.slow
def test_a_cost_cap_holds_across_workers_with_dialogues_in_flight(pg_url: str, tmp_path: Path, capsys):
    """Two workers playing 4 dialogues at once each, a cap of about 3 dialogues: the run spends at most the cap plus
    the estimate's error on the dialogues in flight, where counting only what ended let it pass the cap several
    times."""
    pricing = tmp_path / "prices.toml"
    pricing.write_text("".join(f'["openai:{r}"]\ninput = 1000\noutput = 1000\n' for r in "ujt"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with StubServer(latency=0.05) as stub:
        flags = [
            "--db",
            pg_url,
            "--run-id",
            "in-flight",
            "--user-model",
            "openai:u",
            "--judge-model",
            "openai:j",
            "--target-model",
            "openai:t",
            "--base-url",
            stub.url,
            "--turns",
            "2",
            "--per-category",
            "2",
            "--no-trace",
            "--pricing",
            str(pricing),
        ]
        assert run_main([*flags, "--max-cost", "1000", "--limit", "1", "--run-id", "probe", "--json"]) == EXIT_OK
        one = json.loads(capsys.readouterr().out)["cost"]["usd"]  # what one dialogue costs here
        cap = 3.5 * one
        assert run_main([*flags, "--max-cost", str(cap), "--enqueue"]) == EXIT_OK
        workers = [
            subprocess.Popen(
                [sys.executable, "-m", "graph.worker", "--db", pg_url, "--drain", "--concurrency", "4"],
                cwd=ROOT,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        for worker in workers:
            assert worker.wait(timeout=180) == 0, worker.stderr.read()[-2000:]
        capsys.readouterr()
        assert run_main([*flags, "--wait", "--json"]) == EXIT_SOME_FAILED
    summary = json.loads(capsys.readouterr().out)
    budget = summary["budget"]
    assert budget["max_usd"] == pytest.approx(cap) and budget["reserved_usd"] == 0
    assert 2 <= summary["finished"] <= 3 and budget["held"] == 12 - summary["finished"]
    assert (
        budget["spent_usd"] == pytest.approx(summary["finished"] * one, rel=0.25)
        and budget["spent_usd"] <= cap + 0.25 * one
    )
