"""A provider outage: the shared circuit (logic, on a fake clock) and graph.run against a real stub server process
that goes away past a short outage budget: exit 75, dialogues failed with the reason, the printed command resumes."""

from __future__ import annotations

import asyncio
import json
import shlex
import time
from pathlib import Path

import pytest

from checkpoints.outages import OutageError
from models.circuit import ProviderCircuit, ProviderOutageError, is_outage
from models.retries import RetriesExhaustedError
from tests.support.provider_outage import StubProcess, paid_twice, run_flags, start_run, stored_turns


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_outage_reasons_are_connections_timeouts_and_5xx_only():
    assert is_outage("connection") and is_outage("timeout") and is_outage("HTTP 503")
    # A malformed answer is an answer: its calls retry on their own (bounded by the budget, models/resilience.py).
    assert not any(is_outage(kind) for kind in ("non-JSON body", "no choices", "truncated"))
    assert not is_outage("HTTP 429") and not is_outage("HTTP 400") and not is_outage(None)


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
    models = [
        policy.wrap(
            ScriptedChatModel(respond=respond, calls=[]),
            spec="fake:x",
            provider="fake",
            role="target",
            cache_params={},
            endpoint="fake @ http://down",
        )
        for _ in range(4)
    ]
    for model in models:
        model.circuit.first_probe_s = 0.2

    async def all_calls():
        return await asyncio.gather(*(m.ainvoke([HumanMessage("hi")]) for m in models))

    replies = asyncio.run(all_calls())
    assert [r.content for r in replies] == ["back"] * 4
    assert policy.stats.outage_waits["connection"] >= 1 and policy.stats.gave_up == {}
    assert policy.outage_summary()["ridden_out"] and not policy.outages_past_budget()


@pytest.mark.slow
@pytest.mark.parametrize("processes", [1, 2])
def test_a_run_past_its_outage_budget_exits_75_and_its_printed_command_finishes_it(tmp_path: Path, processes: int):
    """A real stub server process killed mid-run and kept down past a 3 s budget; restarted, the printed command
    resumes.

    In one process or two (each child's circuit reported to the parent): one outage line naming the endpoint, exit 75.
    """
    from tests.integration.test_processes import children

    stub = StubProcess(tmp_path / "answered.log").start()
    db, run_id = tmp_path / "outage.db", "outage-short"
    flags = run_flags(stub.url, db, run_id, turns=3, per_category=1, concurrency=6) + [
        "--outage-budget",
        "3s",
        "--processes",
        str(processes),
    ]
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

    from graph.config.experiment import ExperimentError, load_experiment
    from graph.config.run_config import ConfigError, RunConfig

    path = tmp_path / "run.toml"
    path.write_text('outage_budget = "30m"\n')
    config = RunConfig.from_toml(path)
    assert config.outage_budget == 1800 and config.call_policy().outage_budget == 1800
    assert RunConfig().outage_budget == 600  # 10 minutes by default
    flags = RunConfig.from_flags(
        argparse.Namespace(outage_budget="90s"), explicit={"outage_budget"}, experiment=load_experiment(path)
    )
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


def test_the_parent_of_several_processes_sees_their_outages_as_one_per_endpoint():
    """--processes: each child's circuit reports mirrored on the parent's policy (graph/workers/processes.py sends
    them)."""
    from models.call_policy import CallPolicy

    endpoint = "openai @ http://x/v1"
    parent, children = CallPolicy(outage_budget=60), [CallPolicy(outage_budget=60) for _ in range(2)]
    clock = Clock()
    for child in children:
        child.circuit_for(endpoint)._clock = clock
        child.circuit_for("google_genai")._clock = clock
    assert [c.outage_reports() for c in children] == [[], []]  # nothing to tell while every call is answered
    clock.now = time.monotonic() - 10  # the children's clock is the machine's monotonic one, as the parent's
    for child in children:
        circuit = child.circuit_for(endpoint)
        callers = [object() for _ in range(3)]
        assert [circuit.failed("connection", caller=c) for c in callers][-1]
        circuit._count_waiting(+2)
    clock.now += 2
    parent.mirror_outages("child 1", children[0].outage_reports())
    parent.mirror_outages("child 2", children[1].outage_reports())
    [status] = parent.outages()  # one line for the endpoint, whichever child meets it
    assert (
        status.endpoint == endpoint and status.waiting == 4 and 9 < status.down_s < 30 and status.reason == "connection"
    )
    assert not parent.outages_past_budget()
    # Child 1 rides the outage out; child 2 outlasts the budget: the run exits 75, one endpoint named once.
    children[0].circuit_for(endpoint)._held = True
    children[0].circuit_for(endpoint).answered()
    clock.now += 60
    with pytest.raises(ProviderOutageError):
        children[1].circuit_for(endpoint).admit()
    parent.mirror_outages("child 1", children[0].outage_reports())
    parent.mirror_outages("child 2", children[1].outage_reports())
    assert [c.endpoint for c in parent.outages_past_budget()] == [endpoint] and parent.outages() == []
    summary = parent.outage_summary()
    assert summary["past_budget"] == [{"endpoint": endpoint, "seconds": 62.0}]
    assert summary["ridden_out"] == [{"endpoint": endpoint, "seconds": 2.0}]


def test_overlapping_outages_of_several_processes_count_once_and_a_gone_process_waits_no_more():
    from models.call_policy import CallPolicy
    from models.circuit import CircuitReport

    parent, now = CallPolicy(), time.monotonic()
    parent.mirror_outages(
        1, [CircuitReport("e", None, "timeout", 0, None, ((now - 50, now - 30), (now - 10, now - 5)))]
    )
    parent.mirror_outages(2, [CircuitReport("e", now - 3, "timeout", 1, None, ((now - 40, now - 20),))])
    assert [c["seconds"] for c in parent.outage_summary()["ridden_out"]] == [30.0, 5.0]  # 50..20 merged, then 10..5
    assert [s.waiting for s in parent.outages()] == [1]
    gone = CircuitReport("e", now - 3, "timeout", 1, None, ((now - 40, now - 20),)).closed()
    parent.mirror_outages(2, [gone])  # its process died mid-outage: no call of it waits any more
    assert parent.outages() == [] and not parent.outages_past_budget()


@pytest.mark.slow
def test_the_parent_display_shows_a_childs_provider_outage_and_the_run_exits_75(tmp_path: Path):
    """graph.run --processes 2 in a terminal: the progress display shows the outage its players meet, then one line,
    75."""
    import os
    import sys

    import pexpect

    from tests.conftest import REPO

    stub = StubProcess(tmp_path / "answered.log").start()
    flags = run_flags(stub.url, tmp_path / "outage.db", "shown", turns=3, per_category=1, concurrency=6)
    flags = [f for f in flags if f != "--json"] + ["--outage-budget", "6s", "--processes", "2"]
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.endswith(("_API_KEY", "_TOKEN")) and k not in ("COLUMNS", "NO_COLOR")
    }
    env.update(PYTHONPATH=str(REPO), TERM="xterm-256color")
    run = pexpect.spawn(
        sys.executable,
        ["-m", "graph.run", *flags],
        env=env,
        cwd=str(REPO),
        dimensions=(40, 400),
        encoding="utf-8",
        timeout=60,
    )
    try:
        deadline = time.monotonic() + 60
        while len(stub.answered()) < 8:
            assert run.isalive() and time.monotonic() < deadline, run.before
            time.sleep(0.1)
        stub.stop()
        run.expect(f"openai @ {stub.url} unreachable for \\d+ s \\(connection\\): \\d+ call\\(s\\) wait", timeout=30)
        run.expect(pexpect.EOF, timeout=60)
    finally:
        stub.stop()
        run.close()
    assert run.exitstatus == 75 and "Traceback" not in run.before
