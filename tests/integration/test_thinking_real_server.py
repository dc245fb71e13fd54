"""Thinking settings against a real server: SmolLM2-135M-Instruct behind ``python -m llama_cpp.server``.

What it adds beyond the stub: the real server's answer to a request carrying the chat template's thinking switch
(llama-cpp-python's server has no reasoning parser and takes no ``chat_template_kwargs``: it ignores them, as
pydantic's default drops unknown fields, and answers), read through langchain-deepseek's ``ChatDeepSeek`` (which
``openai:`` specs with a base URL use), with the run's record holding the switch and the caps that went out.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from checkpoints.run_record import RunRecord
from tests.conftest import REPO

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and k != "OPENAI_BASE_URL"}


def test_thinking_off_is_sent_to_a_real_server_which_ignores_it_and_check_says_no_reasoning(
    smollm2_server: tuple[str, Path], tmp_path: Path
) -> None:
    root, _log = smollm2_server
    base = ["--user-model", "openai:smollm2", "--judge-model", "openai:smollm2", "--target-model", "openai:smollm2"]
    base += ["--base-url", f"{root}/v1", "--thinking", "off", "judge=off", "user=off"]
    check = subprocess.run(
        [sys.executable, "-m", "graph.run", *base, "--check", "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=_env(),
        timeout=600,
    )
    assert check.returncode == 0, check.stderr[-2000:]
    (model,) = json.loads(check.stdout)
    assert model["thinks"] is False and model["thinking"] == "off" and model["error"] is None
    db = tmp_path / "d.db"
    run = subprocess.run(
        [sys.executable, "-m", "graph.run", *base, "--turns", "1", "--categories", "gender"]
        + ["--max-tokens", "40", "--db", str(db), "--run-id", "smol-off", "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=_env(),
        timeout=1200,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads(run.stdout)
    assert summary["finished"] == 1 and summary["reasoning"]["turns_with_reasoning"] == 0
    target = summary["requests"]["target"]
    assert target["thinking"] == "off" and target["reply_cap"] == 40 and target["request_cap"] == 40
    assert target["sent"]["extra_body"] == {"chat_template_kwargs": {"enable_thinking": False}}
    assert target["sent"]["max_tokens"] == 40 and target["notes"] == []
    with sqlite3.connect(db) as conn:
        (config,) = conn.execute("select config from runs").fetchone()
        (tokens,) = conn.execute("select tokens from turns").fetchone()
    assert RunRecord.from_stored(json.loads(config)).resolved.requests["target"]["thinking"] == "off"
    assert json.loads(tokens)["target_output_tokens"] <= 40  # the real server held to the reply's cap
