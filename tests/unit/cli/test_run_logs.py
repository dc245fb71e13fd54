"""A run that talks to a log: plain progress lines (no ANSI) at each tenth and every 30 s when stderr is not a
terminal, outage notices as lines, ``--quiet`` silencing them, ``--json`` keeping stdout to the summary; ``--help``
grouped with examples; the "no judge-corrected rates" note with each command on its own line."""

from __future__ import annotations

import io
import json
import re

import pytest

from cli.progress_log import ProgressLog
from models.circuit import OutageStatus
from tests.support import forked
from tests.support.stub_server import StubServer

_ANSI = re.compile(r"\x1b\[")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_line_at_each_tenth_and_after_30_quiet_seconds_with_the_counts_eta_calls_and_cost():
    clock, out, calls = Clock(), io.StringIO(), [0]
    log = ProgressLog(
        total=20, turns_per_dialogue=2, stream=out, run_id="r", calls=lambda: calls[0], cost=lambda: 1.5, clock=clock
    )
    for i in range(20):
        clock.now += 3
        calls[0] += 6
        log.on_progress("step", f"t{i}", 2)
        log.on_progress("failed" if i == 4 else "finished", f"t{i}", 2)
    lines = out.getvalue().splitlines()
    assert len(lines) == 10  # 2 of 20 dialogues make a tenth
    assert lines[0].endswith("run r: 2/20 dialogues (10%), 4/40 turns, 0 failed, 120 calls/min, ETA 54 s, $1.50 spent")
    assert "5/20" not in out.getvalue() and "6/20 dialogues (30%), 12/40 turns, 1 failed" in lines[2]
    assert lines[-1].endswith("20/20 dialogues (100%), 40/40 turns, 1 failed, 120 calls/min, done, $1.50 spent")

    quiet = io.StringIO()
    log = ProgressLog(total=100, turns_per_dialogue=5, stream=quiet, clock=clock)
    log.on_progress("step", "a", 1)
    log.tick()
    assert quiet.getvalue() == ""  # nothing to say yet
    clock.now += 30
    log.tick()
    assert quiet.getvalue().count("\n") == 1 and "0/100 dialogues (0%), 1/500 turns" in quiet.getvalue()
    clock.now += 10
    log.tick()
    assert quiet.getvalue().count("\n") == 1  # at most every 30 s


def test_an_outage_begins_and_ends_as_lines_and_a_run_stopped_by_a_wrong_setting_says_nothing_more():
    clock, out = Clock(), io.StringIO()
    down: list[OutageStatus] = []
    mute = [False]
    log = ProgressLog(
        total=4, turns_per_dialogue=1, stream=out, outages=lambda: down, mute=lambda: mute[0], clock=clock
    )
    down.append(OutageStatus("openai @ http://x/v1", 12.0, 588.0, "connection", 3))
    log.tick()
    log.tick()  # still down: said once
    down.clear()
    log.tick()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert "openai @ http://x/v1 unreachable for 12 s (connection): 3 call(s) wait" in lines[0]
    assert lines[1].endswith("openai @ http://x/v1 answers again after 12 s unreachable")
    mute[0] = True
    log.on_progress("failed", "a", 0)
    assert len(out.getvalue().splitlines()) == 2


def _run(*args, env=None):
    from tests.unit.models.test_first_contact import _run as run

    return run(*args, env=env)


@pytest.mark.slow
def test_graph_run_into_a_log_writes_plain_progress_lines_and_quiet_silences_them(tmp_path):
    with StubServer(latency=0.01) as stub:
        flags = [
            "--user-model",
            "openai:stub",
            "--target-model",
            "openai:stub",
            "--judge-model",
            "openai:stub",
            "--base-url",
            stub.url,
            "--per-category",
            "2",
            "--turns",
            "2",
            "--no-trace",
            "--json",
        ]
        done, _ = _run(*flags, "--db", str(tmp_path / "a.db"), env={"FORCE_COLOR": "1"})
        quiet, _ = _run(*flags, "--db", str(tmp_path / "b.db"), "--quiet")
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["finished"] == 12  # stdout: the summary only
    lines = [line for line in done.stderr.splitlines() if " dialogues (" in line]
    assert not _ANSI.search(done.stderr)
    tenths = [str(n) for n in range(1, 13) if n * 10 // 12 > (n - 1) * 10 // 12]  # a line as each tenth is crossed
    assert [re.search(r"(\d+)/12 dialogues", line).group(1) for line in lines] == tenths
    assert re.search(r"12/12 dialogues \(100%\), 24/24 turns, 0 failed, \d+ calls/min, done$", lines[-1])
    assert quiet.returncode == 0 and " dialogues (" not in quiet.stderr


def test_help_groups_the_flags_and_ends_with_examples(capsys):
    import pytest

    from cli.run import _HELP_GROUPS, build_parser

    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["--help"])
    text = capsys.readouterr().out
    titles = [t for t in ("seeds:", "models:", "execution:", "store:", "output:", "cost:", "scale-out:", "examples:")]
    assert [text.index(f"\n{t}\n") for t in titles] == sorted(text.index(f"\n{t}\n") for t in titles)
    grouped = {flag for flags in _HELP_GROUPS.values() for flag in flags}
    every = {f for a in parser._actions for f in a.option_strings if f.startswith("--") and f != "--help"}
    assert every - grouped == {"--config"}  # every flag but the experiment file sits in its group
    examples = text.split("\nexamples:\n", 1)[1]
    assert examples.count("  python -m graph.run") == 5
    assert parser.parse_args(["--max-concurrency", "3", "--quiet"]).max_concurrency == 3  # parsing is unchanged


def test_the_no_corrected_rates_note_puts_each_command_on_its_own_line():
    from rich.console import Console

    from evals.judge_error.run_blocks import how_to_validate
    from evals.report.summary_view import _render_corrected

    note = how_to_validate("openai:judge", "r1", "/tmp/runs.db")
    console = Console(record=True, width=80)
    _render_corrected({"judge_corrected": {"refusal": note}}, console)
    lines = console.export_text().splitlines()
    commands = [line.strip() for line in lines if line.strip().startswith("python -m ")]
    assert commands == [
        "python -m evals.judge PAIRS.jsonl --judge-model openai:judge --db /tmp/runs.db",
        "python -m evals.annotate export --run-id r1 --design random --sample 200 --out sample.csv --db /tmp/runs.db",
        "python -m evals.annotate validate sample.csv --run-id r1 --db /tmp/runs.db",
    ]
    assert lines[0].startswith("no judge-corrected rates: judge openai:judge is unvalidated")


@pytest.mark.slow
def test_status_of_a_run_in_progress_from_another_process_read_only(tmp_path, backend_db):
    """graph.runs status RUN while graph.run plays it (SQLite or PostgreSQL): progress against the plan, ETA, the
    rates so far; the run is not disturbed; once it ends its status says so, and the human form renders."""
    import time

    from tests.conftest import REPO
    from tests.support.provider_outage import start_run

    db = str(tmp_path / "live.db") if isinstance(backend_db, type(tmp_path)) else backend_db
    pricing = tmp_path / "pricing.toml"
    pricing.write_text('["openai:stub"]\ninput = 1000.0\noutput = 2000.0\n')
    with StubServer(latency=0.15) as stub:
        run = start_run(
            "--user-model",
            "openai:stub",
            "--target-model",
            "openai:stub",
            "--judge-model",
            "openai:stub",
            "--base-url",
            stub.url,
            "--per-category",
            "2",
            "--turns",
            "2",
            "--no-trace",
            "--json",
            "--db",
            db,
            "--run-id",
            "live",
            "--pricing",
            str(pricing),
            "--yes",  # its made-up prices put it past --confirm-cost
            "--max-concurrency",
            "1",
        )

        def status(*extra):
            done = forked.run("graph.runs", "status", "live", "--db", db, *extra, cwd=REPO, timeout=60)
            assert done.returncode == 0, done.stderr
            return done.stdout

        deadline = time.monotonic() + 90
        seen = None
        while time.monotonic() < deadline and run.poll() is None:
            try:
                now = json.loads(status("--json", "--pricing", str(pricing)))
            except AssertionError:
                time.sleep(0.3)  # the run not recorded yet
                continue
            if now["status"] == "running" and 2 <= now["ended"] < 12:
                seen = now
                break
            time.sleep(0.3)
        out, err = run.communicate(timeout=120)
    assert run.returncode == 0, err[-2000:]
    assert seen is not None, "no status seen while the run played"
    assert seen["planned"] == 12 and seen["turns"]["planned"] == 24 and 4 <= seen["turns"]["done"] < 24
    assert seen["eta_s"] is not None and seen["eta_s"] > 0
    assert seen["cost"]["usd"] > 0 and len(seen["per_turn"]) == 2
    assert "refusal" in seen["judge_corrected"]  # no validation of the stub judge: raw rates only, and why
    assert json.loads(out)["finished"] == 12  # undisturbed
    final = json.loads(status("--json"))
    assert final["status"] == "finished" and final["ended"] == 12 and final["eta_s"] is None
    assert final["per_turn"][0]["labelled"] == 12
    text = " ".join(status().split())
    assert "run live (finished): 12/12 dialogues ended (12 finished, 0 failed), 24/24 turns, done" in text
    assert "Bias rates so far" in text
    assert "12/12 dialogues ended" in status("--watch", "0.1")  # a run no longer playing: drawn once, then it returns
