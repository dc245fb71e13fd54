"""``graph.run --processes``: its default and the flags it cannot combine with (one line, exit 2, nothing written).

The default, against a real stub server process: a run whose models are all served elsewhere plays in a process per
core (its player processes seen in /proc while it runs, and the claims table they share), one that only one process can
play (PostgreSQL, --pause-after, --max-cost) plays here, without error. The embedded model:
tests/integration/test_processes.py.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest

from graph.workers.processes import cores, process_count
from models.registry import RoleModel, Sampling, computes_here
from tests.integration.test_processes import children
from tests.support.provider_outage import StubProcess, run_flags, start_run
from tests.unit.cli.test_run_cli import run_cli


@pytest.mark.parametrize(
    "extra",
    [
        ["--pause-after", "1"],
        ["--interactive"],
        ["--max-cost", "1", "--pricing", "examples/pricing.toml"],
        ["--config", "CAPPED"],
    ],
)
def test_processes_with_a_single_process_flag_is_one_line_exit_2_and_writes_nothing(
    tmp_path: Path, extra: list[str]
) -> None:
    db = tmp_path / "d.db"
    capped = tmp_path / "capped.toml"
    capped.write_text("max_cost = 5\n")  # a cost cap from an experiment file, as from the flag
    extra = [str(capped) if a == "CAPPED" else a for a in extra]
    result = run_cli("--processes", "2", "--db", str(db), *extra)
    assert result.returncode == 2
    assert "--processes" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not db.exists()


def role(spec: str, **sampling) -> RoleModel:
    return RoleModel(spec=spec, model_id=spec, chat=None, style="chat", sampling=Sampling(**sampling))


def test_models_served_elsewhere_get_a_process_per_core_and_a_model_computed_here_one(providers) -> None:
    providers("fake", lambda name, role, sampling: None)
    served = [
        role("openai:gpt-4o-mini"),
        role("google_genai:gemini-2.5-flash"),
        role("hf:http://127.0.0.1:8080"),
        role("hf:meta-llama/Llama-3.1-8B-Instruct", extra={"provider": "auto"}),
        role("openai:x", base_url="http://h/v1"),
    ]
    assert not any(computes_here(m.spec, m.sampling) for m in served)
    many = {"dialogues": 1000, "concurrency": 64}
    assert process_count(None, **many, models=served, single=False) == cores() >= 1
    assert (
        process_count(None, dialogues=1, concurrency=64, models=served, single=False) == 1
    )  # never more than its dialogues
    assert (
        process_count(None, dialogues=1000, concurrency=1, models=served, single=False) == 1
    )  # nor than it plays at once
    for here in (role("local:gemma3-270m"), role("hf:HuggingFaceTB/SmolLM2-135M-Instruct"), role("fake:scripted")):
        assert computes_here(here.spec, here.sampling)  # llama.cpp, a transformers pipeline, a provider registered here
        assert process_count(None, **many, models=[*served, here], single=False) == 1
    assert process_count(None, **many, models=served, single=True) == 1  # PostgreSQL, pauses, a cost cap
    assert process_count(3, **many, models=[role("local:gemma3-270m")], single=False) == 3  # asked for
    assert process_count(8, dialogues=5, concurrency=64, models=served, single=False) == 5
    assert process_count(8, dialogues=50, concurrency=4, models=served, single=False) == 4


def play_watching_players(*args: str) -> tuple[tuple[int, str, str], int]:
    """Run graph.run to its end; (code, stdout, stderr) and the most player processes it had at once."""
    run = start_run(*args)
    most = 0
    while run.poll() is None:
        most = max(most, len(children(run.pid)))
        time.sleep(0.02)
    out, err = run.communicate()
    return (run.returncode, out, err), most


def claims_table(db: Path) -> bool:
    """Whether the run was played by player processes (they share a claims table; one process has none)."""
    conn = sqlite3.connect(db)
    try:
        return conn.execute("select count(*) from sqlite_master where name = 'dialogue_claims'").fetchone()[0] == 1
    finally:
        conn.close()


@pytest.fixture
def stub(tmp_path: Path):
    served = StubProcess(tmp_path / "answered.log", latency=0.1).start()
    yield served
    served.stop()


@pytest.mark.slow
def test_a_run_of_served_models_plays_in_a_process_per_core_by_default(tmp_path: Path, stub: StubProcess) -> None:
    db = tmp_path / "d.db"
    (code, out, err), most = play_watching_players(
        *run_flags(stub.url, db, "r", turns=2, per_category=1, concurrency=6)
    )
    assert code == 0, err[-3000:]
    assert json.loads(out)["finished"] == 6
    expected = min(cores(), 6)
    assert most == (expected if expected > 1 else 0) and claims_table(db) == (expected > 1)


@pytest.mark.parametrize(
    "extra",
    [
        ["--pause-after", "1"],
        ["--max-cost", "5", "--pricing", "PRICES"],
        ["--config", "CAPPED", "--pricing", "PRICES"],
        ["--db", "PG"],
    ],
    ids=["pause-after", "max-cost", "max-cost-in-a-file", "postgres"],
)
@pytest.mark.slow
def test_a_run_only_one_process_can_play_plays_here_by_default_without_error(
    tmp_path: Path, stub: StubProcess, request: pytest.FixtureRequest, extra: list[str]
) -> None:
    db = tmp_path / "d.db"
    prices = tmp_path / "prices.toml"
    prices.write_text('["openai:stub"]\ninput = 1.0\noutput = 2.0\n')
    capped = tmp_path / "capped.toml"
    capped.write_text("max_cost = 5\n")
    named = {"PRICES": str(prices), "CAPPED": str(capped)}
    extra = [request.getfixturevalue("pg_url") if a == "PG" else named.get(a, a) for a in extra]
    (code, out, err), most = play_watching_players(
        *run_flags(stub.url, db, "r", turns=2, per_category=1, concurrency=6), *extra
    )
    assert code == 0, err[-3000:]
    summary = json.loads(out)
    assert summary["dialogues"] == 6 and summary["failed"] == []
    assert most == 0
    if request.node.callspec.id != "postgres":
        assert not claims_table(db)
