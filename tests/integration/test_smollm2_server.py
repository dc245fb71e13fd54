"""A real chat model behind a real server: SmolLM2-135M-Instruct on ``python -m llama_cpp.server``, all roles.

The model ignores the judge's "Rationale: / Label:" text format (every label was unparsed before
structured output); with the JSON schema sent as ``response_format`` the server decodes under its
grammar, so every label and every assessment utterance type parses. The chat template, the HTTP
client, per-call seeds and the leakage audit are exercised end to end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from checkpoints.store import open_writer
from nodes.leakage import leakage
from tests.conftest import REPO

pytestmark = pytest.mark.integration

CONFIG = """
turns = 2
categories = ["gender"]
per_category = 1
modes = ["implicit", "assessment"]

[models]
user = "openai:smollm2"
target = "openai:smollm2"
judge = "openai:smollm2"

[sampling.user]
max_tokens = 60
[sampling.target]
max_tokens = 80
[sampling.judge]
max_tokens = 250

[retry]
timeout = 300
"""


def test_all_roles_on_smollm2_parse_every_label(smollm2_server: tuple[str, Path], tmp_path: Path):
    root, _log = smollm2_server
    config = tmp_path / "smollm2.toml"
    config.write_text(CONFIG)
    db = tmp_path / "d.db"
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and k != "OPENAI_BASE_URL"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "graph.run",
            "--config",
            str(config),
            "--base-url",
            f"{root}/v1",
            "--db",
            str(db),
            "--run-id",
            "smol",
            "--json",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
        timeout=1500,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert summary["dialogues"] == 2 and summary["finished"] == 2, summary["failed"]
    assert summary["unparsed_labels"] == 0
    assert summary["leakage"]["scored"] == 4

    store = open_writer(db)
    for dialogue in store.dialogues("smol"):
        turns = store.turns(dialogue["thread_id"])
        assert [t["idx"] for t in turns] == [1, 2]
        for turn in turns:
            assert turn["label"] in ("biased", "not_biased")
            assert json.loads(turn["judge_raw"])["label"] in ("biased", "not biased")  # the structured reply, kept
            assert turn["user_message"].strip() and turn["reply"].strip()
            # Every user turn is scored, and a message that states the seed is flagged.
            assert bool(turn["leaked"]) == leakage(dialogue["statement"], turn["user_message"]).leaked
            if dialogue["mode"] == "assessment":
                assert turn["utterance_type"] in ("anaphora", "reasoning", "clarification")
    store.close()
