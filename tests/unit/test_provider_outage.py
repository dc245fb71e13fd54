"""A provider outage: the shared circuit (logic, on a fake clock) and graph.run against a real stub server process
that goes away past a short outage budget: exit 75, dialogues failed with the reason, the printed command resumes."""

from __future__ import annotations

import asyncio
import json
import shlex
import time
from pathlib import Path

import pytest

from models.circuit import ProviderCircuit, ProviderOutageError, is_outage
from models.retries import RetriesExhaustedError
from checkpoints.outages import OutageError
from tests.provider_outage import StubProcess, paid_twice, run_flags, start_run, stored_turns


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_outage_reasons_are_connections_timeouts_and_5xx_only():
    assert is_outage("connection") and is_outage("timeout") and is_outage("HTTP 503")
    assert not is_outage("HTTP 429") and not is_outage("malformed response") and not is_outage(None)


def test_the_circuit_opens_after_consecutive_failures_lets_one_probe_through_and_closes_on_an_answer():
    clock = Clock()
    circuit = ProviderCircuit("openai @ http://x/v1", budget=60, open_after=3, first_probe_s=2, clock=clock)
    assert circuit.admit() == (0.0, False)
    assert not circuit.failed("connection") and not circuit.failed("connection")
    circuit.answered()  # an answer in between: no outage
    assert [circuit.failed("connection") for _ in range(3)] == [False, False, True]
    wait, probe = circuit.admit()
    assert wait > 0 and not probe  # calls wait until the first probe
    assert circuit.status() is not None and "unreachable" in circuit.status().line()
    clock.now = 2.0
    assert circuit.admit() == (0.0, True)  # one probe
    assert circuit.admit()[0] > 0  # the others keep waiting while it is out
    assert circuit.failed("connection", probe=True)
    clock.now = 3.0
    assert circuit.admit()[0] > 0  # the next probe comes later (backoff)
    clock.now = 10.0
    assert circuit.admit() == (0.0, True)
    circuit.answered(probe=True)
    assert circuit.admit() == (0.0, False) and circuit.status() is None
    assert circuit.outages == [10.0]


def test_one_call_failing_alone_is_its_own_error_until_it_lasts():
    """Per-call retries stay for per-call errors: one call's failures open the circuit only after 10 s of them."""
    clock, call = Clock(), object()
    circuit = ProviderCircuit("x", budget=60, open_after=3, open_after_s=10, clock=clock)
    assert not any(circuit.failed("HTTP 500", caller=call) for _ in range(5))
    clock.now = 10.0
    assert circuit.failed("HTTP 500", caller=call)  # still failing 10 s on: an outage, the call waits
    other = ProviderCircuit("y", budget=60, open_after=3, clock=clock)
    assert [other.failed("connection", caller=c) for c in (call, call, object())] == [False, False, True]


def test_past_the_budget_every_call_fails_with_the_reason():
    clock = Clock()
    circuit = ProviderCircuit("openai @ http://x/v1", budget=5, open_after=2, clock=clock)
    circuit.failed("HTTP 503")
    assert circuit.failed("HTTP 503")
    clock.now = 6.0
    with pytest.raises(ProviderOutageError) as caught:
        circuit.admit()
    assert isinstance(caught.value, OutageError) and isinstance(caught.value, RetriesExhaustedError)
    assert "unreachable for 6 s (HTTP 503), past the outage budget of 5 s" in str(caught.value)
    assert circuit.expired and circuit.status() is None
    with pytest.raises(ProviderOutageError):
        circuit.admit()  # new calls fail at once: the run stops


def test_waiting_calls_spend_no_retries_and_finish_once_the_provider_is_back():
    """Through the resilience wrapper: 40 failures in a row (an outage) with retries=1, then answers: no call fails."""
    from langchain_core.messages import HumanMessage

    from models.call_policy import CallPolicy
    from models.retries import RetryPolicy
    from tests.conftest import ScriptedChatModel

    down_until = time.monotonic() + 1.5

    class Refused(ConnectionError):
        pass

    def respond(messages, n):
        if time.monotonic() < down_until:
            raise Refused("connection refused")
        return "back"

    policy = CallPolicy(retry=RetryPolicy(attempts=2, base_delay=0.01, max_delay=0.02, timeout=None), outage_budget=30)
    models = [policy.wrap(ScriptedChatModel(respond=respond, calls=[]), spec="fake:x", provider="fake", role="target",
                          cache_params={}, endpoint="fake @ http://down") for _ in range(4)]
    for model in models:
        model.circuit.first_probe_s = 0.2

    async def all_calls():
        return await asyncio.gather(*(m.ainvoke([HumanMessage("hi")]) for m in models))

    replies = asyncio.run(all_calls())
    assert [r.content for r in replies] == ["back"] * 4
    assert policy.stats.outage_waits["connection"] >= 1 and policy.stats.gave_up == {}
    assert policy.outage_summary()["ridden_out"] and not policy.outages_past_budget()


@pytest.mark.parametrize("processes", [1, 2])
def test_a_run_past_its_outage_budget_exits_75_and_its_printed_command_finishes_it(tmp_path: Path, processes: int):
    """A real stub server process killed mid-run and kept down past a 3 s budget; restarted, the printed command resumes.

    In one process or two (each child's circuit reported to the parent): one outage line naming the endpoint, exit 75.
    """
    from tests.integration.test_processes import children

    stub = StubProcess(tmp_path / "answered.log").start()
    db, run_id = tmp_path / "outage.db", "outage-short"
    flags = run_flags(stub.url, db, run_id, turns=3, per_category=1, concurrency=6) + ["--outage-budget", "3s",
                                                                                       "--processes", str(processes)]
    endpoint = f"openai @ {stub.url}"
    try:
        run = start_run(*flags)
        stub.wait_answered(8, run)
        players = len(children(run.pid))
        stub.stop()  # the provider goes away and stays away past the budget
        out, err = run.communicate(timeout=120)
        assert run.returncode == 75, err[-2000:]
        assert players == (processes if processes > 1 else 0)
        assert "Traceback" not in err
        summary = json.loads(out)
        assert summary["failed"], summary
        for failed in summary["failed"]:
            assert "past the outage budget of 3 s" in failed["error"]
        assert summary["finished"] + len(summary["failed"]) == summary["dialogues"] == 6
        assert [o["endpoint"] for o in summary["outages"]["past_budget"]] == [endpoint]  # one endpoint, once
        resume = summary["resume"]
        assert resume.startswith("python -m graph.run ") and "--outage-budget 3s" in resume
        outage_line = [line for line in err.splitlines() if line.startswith("outage:")]
        assert len(outage_line) == 1 and resume in " ".join(err.split())
        assert outage_line[0].startswith(f"outage: {endpoint} stayed unreachable past the outage budget")
        stub.start()  # the provider is back: the printed command, as is, finishes the run
        again = start_run(*shlex.split(resume)[3:])
        out, err = again.communicate(timeout=180)
    finally:
        stub.stop()
    assert again.returncode == 0, err[-2000:]
    final = json.loads(out)
    assert final["finished"] == final["dialogues"] == 6 and final["failed"] == []
    turns = stored_turns(db, run_id)
    assert len(turns) == 6 and all(t == [(i, True, True) for i in (1, 2, 3)] for t in turns.values())
    assert paid_twice(stub.answered()) == 0


def test_the_outage_budget_comes_from_the_flag_or_the_experiment_file_and_reaches_the_call_policy(tmp_path: Path):
    import argparse

    from graph.config import ConfigError, RunConfig
    from graph.experiment import ExperimentError, load_experiment

    path = tmp_path / "run.toml"
    path.write_text('outage_budget = "30m"\n')
    config = RunConfig.from_toml(path)
    assert config.outage_budget == 1800 and config.call_policy().outage_budget == 1800
    assert RunConfig().outage_budget == 600  # 10 minutes by default
    flags = RunConfig.from_flags(argparse.Namespace(outage_budget="90s"), explicit={"outage_budget"},
                                 experiment=load_experiment(path))
    assert flags.outage_budget == 90  # the flag beats the file
    path.write_text('outage_budget = "soon"\n')
    with pytest.raises(ExperimentError, match="outage_budget must be seconds"):
        load_experiment(path)
    with pytest.raises(ConfigError, match="--outage-budget"):
        RunConfig.from_flags(argparse.Namespace(outage_budget="0"))


def test_a_probe_that_never_reports_back_is_replaced():
    from models.circuit import LOST_PROBE_S

    clock = Clock()
    circuit = ProviderCircuit("x", budget=3600, open_after=2, first_probe_s=1, clock=clock)
    circuit.failed("timeout")
    circuit.failed("timeout")
    clock.now = 1.0
    assert circuit.admit() == (0.0, True)  # this probe is then cancelled: it never says how it went
    clock.now = 1.0 + LOST_PROBE_S / 2
    assert circuit.admit()[0] > 0
    clock.now = 2.0 + LOST_PROBE_S
    assert circuit.admit() == (0.0, True)


def test_a_worker_gives_a_provider_past_its_budget_a_fresh_budget_on_its_next_job():
    from models.call_policy import CallPolicy

    policy = CallPolicy(outage_budget=5)
    circuit = policy.circuit_for("openai @ http://x/v1")
    clock = Clock()
    circuit._clock = clock
    circuit.failed("connection")
    circuit.failed("connection")
    circuit.failed("connection")
    clock.now = 6.0
    with pytest.raises(ProviderOutageError):
        circuit.admit()
    assert policy.outages_past_budget() == [circuit]
    policy.reset_outages_past_budget()
    assert policy.outages_past_budget() == [] and circuit.admit() == (0.0, False)
