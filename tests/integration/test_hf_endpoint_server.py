"""A whole dialogue through the ``hf:`` endpoint provider (langchain-huggingface) against a real server on 127.0.0.1.

``hf:http://…`` builds ``ChatHuggingFace(llm=HuggingFaceEndpoint(endpoint_url=…))``, which
talks to the URL with huggingface_hub's InferenceClient (``/v1/chat/completions``, the
protocol TGI and Inference Endpoints speak). Here the server is llama-cpp-python's,
serving SmolLM2-135M-Instruct: a real chat model, so the pipeline (client, wrapper,
cache, graph, store) is checked end to end; label quality is not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from checkpoints.store import open_writer
from models.registry import Sampling, create_role_model
from tests.conftest import REPO

pytestmark = pytest.mark.integration

_KEY_VARIABLES = ("HF_TOKEN", "HUGGINGFACEHUB_API_TOKEN", "HUGGING_FACE_HUB_TOKEN")


def _chat_requests(log: Path) -> int:
    return log.read_text(errors="replace").count("POST /v1/chat/completions")


def _run(config: Path, db: Path, url: str, run_id: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in _KEY_VARIABLES and not k.endswith("_API_KEY")}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "graph.run",
            "--config",
            str(config),
            "--target-model",
            f"hf:{url}",
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


def test_two_turn_dialogue_through_the_hf_endpoint_provider(smollm2_server, tmp_path: Path):
    url, log = smollm2_server
    config = tmp_path / "hf.toml"
    config.write_text(
        f"""
turns = 2
categories = ["gender"]
per_category = 1
sampling_seed = 0

[models]
user = "hf:{url}"
judge = "hf:{url}"

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
    before = _chat_requests(log)
    summary = _run(config, db, url, "hf")
    assert summary["dialogues"] == 1 and summary["finished"] == 1, summary["failed"]
    assert summary["model_ids"]["target"] == f"hf-endpoint:{url}"
    assert summary["cache"]["misses"] == 6 and summary["cache"]["hits"] == 0
    assert _chat_requests(log) - before == 6  # every call went to the server, through Hugging Face's client

    store = open_writer(db)
    (dialogue,) = store.dialogues("hf")
    assert dialogue["status"] == "finished" and dialogue["stop_reason"] == "max_turns"
    turns = store.turns(dialogue["thread_id"])
    assert [t["idx"] for t in turns] == [1, 2]
    for turn in turns:
        assert turn["user_message"].strip() and turn["reply"].strip()
        assert turn["target_model"] == f"hf:{url}"
        assert turn["label"] in ("biased", "not_biased", "unparsed") and turn["judge_raw"]
        tokens = json.loads(turn["tokens"])
        assert 0 < tokens["target_output_tokens"] <= 40  # max_new_tokens reached the server
    store.close()

    # The same dialogue under a new run id: every request is answered from the response cache.
    again = _run(config, db, url, "hf-again")
    assert again["cache"]["hits"] == 6 and again["cache"]["misses"] == 0
    assert _chat_requests(log) - before == 6


def test_the_hf_endpoint_model_streams_through_the_wrapper(smollm2_server):
    url, log = smollm2_server
    model = create_role_model(f"hf:{url}", role="target", sampling=Sampling(temperature=0.7, max_tokens=12, seed=1))
    chunks = list(model.chat.stream([("human", "Say hello to a friend.")]))
    assert len([c for c in chunks if c.content]) > 1  # streamed by the server, chunk by chunk
    full = chunks[0]
    for chunk in chunks[1:]:
        full += chunk
    assert full.content.strip()
    assert full.response_metadata["finish_reason"] in ("stop", "length")
    assert len([c for c in chunks if c.content]) <= 12  # at most one chunk per token: max_new_tokens reached it
    # ChatHuggingFace reports no usage when streaming (it does on invoke, checked in the dialogue above).


def test_a_server_that_never_answered_fails_the_call_at_once_naming_the_setting(tmp_path: Path):
    """Nothing listens at the endpoint and it never answered in this process: a wrong setting, not an outage to wait
    out."""
    from models.call_policy import CallPolicy
    from models.circuit import EndpointSettingError
    from models.retries import RetryPolicy
    from tests.integration.conftest import free_port

    url = f"http://127.0.0.1:{free_port()}"  # nothing listens here
    policy = CallPolicy(retry=RetryPolicy(attempts=2, base_delay=0.0, max_delay=0.0, timeout=30))
    model = create_role_model(f"hf:{url}", role="target", sampling=Sampling(max_tokens=5), policy=policy)
    with pytest.raises(EndpointSettingError, match=r"the target model hf:http://127\.0\.0\.1:\d+ .*connection refused"):
        model.chat.invoke([("human", "hello")])
    assert not policy.stats.retries  # no retry spent on a setting that never worked
