"""``graph.runs export R --to file.db`` copies everything of the run: a re-judged label set, a judge validation,
traces and the response-cache entries of its calls, so reports, traces and a cached re-judge read the same offline.

The run is played by the fake models into PostgreSQL (a real server: ``pg_url``, skipped loudly without one).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support import forked
from tests.unit.checkpoints.test_postgres_commands import RUN, THREAD, cli, outputs, same

REPO = Path(__file__).resolve().parents[3]


def fake(cwd: Path, *args: str, calls: Path | None = None) -> str:
    """A command with the fake models, its model calls per role written to ``calls``."""
    env = {k: v for k, v in os.environ.items() if k != "DYMT_ESB_DB" and not k.endswith("_API_KEY")}
    env |= {"PYTHONPATH": str(REPO), "COLUMNS": "200", **({"FAKE_CALLS_FILE": str(calls)} if calls else {})}
    done = forked.run("tests.support.fake_cli", *args, cwd=cwd, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def judge_calls(calls: Path) -> int:
    return json.loads(calls.read_text()).get("judge", 0)


@pytest.mark.slow
def test_an_exported_run_reads_and_rejudges_from_its_cache_as_the_source(tmp_path: Path, pg_url: str):
    fake(tmp_path, "run", *RUN, "--db", pg_url)
    rejudge = [
        "evals.rejudge",
        "--run-id",
        "r1",
        "--judge-model",
        "fake:j2",
        "--name",
        "second",
        "--cache",
        "--n-boot",
        "20",
    ]
    calls = tmp_path / "calls.json"
    fake(tmp_path, *rejudge, "--db", pg_url, calls=calls)
    assert judge_calls(calls) == 6  # 2 dialogues x 3 turns, none cached yet
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(
        '{"statement": "S", "reply": "R", "label": "biased"}\n{"statement": "S", "reply": "Q", "label": "not biased"}\n'
    )
    fake(tmp_path, "evals.judge", str(pairs), "--judge-model", "fake:j", "--n-boot", "20", "--db", pg_url)

    copy = tmp_path / "copy.db"
    said = cli(tmp_path, "--db", pg_url, "export", "r1", "--to", str(copy), module="graph.runs")
    (line,) = [line for line in said.splitlines() if line.startswith("copied run r1")]  # one line, piped or not
    assert str(copy) in line and "judge_validations 1" in line and "response_cache" in line

    # Reports (the re-judged set and the validation included), replay, trace show: the same on both.
    assert outputs(tmp_path, copy) == outputs(tmp_path, pg_url)
    for db in (pg_url, copy):
        report = tmp_path / f"second-{len(list(tmp_path.glob('second-*')))}"
        cli(
            tmp_path,
            "--run-id",
            "r1",
            "--out",
            str(report),
            "--db",
            str(db),
            "--label-set",
            "second",
            module="evals.report",
        )
    first, second = (
        same((tmp_path / f"second-{i}" / "report.md").read_text(), db) for i, db in ((0, pg_url), (1, copy))
    )
    assert first == second and "second" in first
    assert "validated on" in first
    # The re-judged set's own judge (fake:j2) has no validation: its rates are not corrected for its error.
    assert "judge fake:j2 is unvalidated" in first and "judge fake:j is unvalidated" not in first
    shown = [same(cli(tmp_path, "show", THREAD, "--db", str(db), module="graph.trace"), db) for db in (pg_url, copy)]
    assert shown[0] == shown[1] and "Answer 1." in shown[0]

    # A cached re-judge of the same set: every request was sent before, on the source and on the copy alike.
    said_cached: list[str] = []
    for db in (pg_url, copy):
        calls.unlink()
        said_cached.append(same(fake(tmp_path, *rejudge, "--redo", "--db", str(db), calls=calls), db))
        assert judge_calls(calls) == 0, db
    assert said_cached[0] == said_cached[1] and "labelled 6 replies" in said_cached[0]


@pytest.mark.slow
def test_the_copy_takes_only_cached_replies_whose_text_the_run_stores(tmp_path: Path):
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    from checkpoints.cache import ResponseCache
    from checkpoints.offline_copy import copy_run
    from checkpoints.readers import open_reader

    source = tmp_path / "d.db"
    fake(tmp_path, "run", *RUN, "--no-cache", "--db", str(source))
    cache = ResponseCache(source)
    for key, text in (("a" * 64, "Answer 1."), ("b" * 64, "  Question 2?\n"), ("c" * 64, "A reply of another run.")):
        cache.put(key, ChatResult(generations=[ChatGeneration(message=AIMessage(text))]), spec="fake:x")
    cache.close()
    copy_run(source, "r1", tmp_path / "copy.db")
    copied = ResponseCache(tmp_path / "copy.db")
    try:
        assert copied.get("a" * 64).generations[0].message.content == "Answer 1."
        assert copied.get("b" * 64) is not None and copied.get("c" * 64) is None
    finally:
        copied.close()
    with open_reader(tmp_path / "copy.db") as reader:
        assert reader._query("select count(*) as n from response_cache")[0]["n"] == 2
