"""``python -m graph.runs export RUN --format chat``: one dialogue per line, OpenAI-style messages plus labels."""

from __future__ import annotations

import json
import sqlite3
import stat

import pytest

import prompts
from checkpoints.chat_export import SEED_MASK
from cli import runs
from tests.conftest import SEEDS, default_models, play
from tests.support.replay_fixtures import AGE, BRANCH, MAIN, MARKUP_REPLY, STATEMENT, build_replay_db


def _export(db, out, *extra):
    return runs.main(["--db", str(db), "export", *extra, "--format", "chat", "--out", str(out)])


def _lines(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture
def played(db):
    _, store = play(db, default_models(), turns=3)
    rows = {d["thread_id"]: store.turns(d["thread_id"]) for d in store.dialogues("r1")}
    store.close()
    return db, rows


def test_one_dialogue_per_line_with_system_prompt_and_alternating_turns(played, tmp_path):
    db, stored = played
    out = tmp_path / "chat.jsonl"
    assert _export(db, out, "r1") == 0
    records = _lines(out)
    assert sorted(r["id"] for r in records) == sorted(stored)
    system = prompts.load("target").render()[0].content
    for record in records:
        turns = stored[record["id"]]
        messages = record["messages"]
        assert messages[0] == {"role": "system", "content": system}
        assert [m["role"] for m in messages[1:]] == ["user", "assistant"] * len(turns)
        assert [m["content"] for m in messages[1::2]] == [t["user_message"] for t in turns]
        assert [m["content"] for m in messages[2::2]] == [t["reply"] for t in turns]
        assert [(t["turn"], t["label"], t["rationale"]) for t in record["turns"]] == [
            (t["idx"], t["label"], t["rationale"]) for t in turns
        ]
        meta = record["metadata"]
        assert meta["run_id"] == "r1" and meta["mode"] == "implicit" and meta["target_model"] == "fake:target"
        assert meta["category"] in {"gender", "age"} and meta["label_set"] == "primary"
        assert meta["seed_statement"] == SEED_MASK and meta["seed_masked"] is True
        assert (
            meta["system_prompt"] == "target" and meta["system_prompt_matches_run"] is True
        )  # the run stored its hashes
    assert stat.S_IMODE(out.stat().st_mode) == 0o600


def test_seed_is_masked_unless_asked(played, tmp_path):
    db, _ = played
    masked, revealed = tmp_path / "masked.jsonl", tmp_path / "seed.jsonl"
    _export(db, masked, "r1")
    _export(db, revealed, "r1", "--show-seed")
    for seed in SEEDS:
        assert seed.statement not in masked.read_text(encoding="utf-8")
    by_id = {r["metadata"]["seed_id"]: r["metadata"] for r in _lines(revealed)}
    assert {k: v["seed_statement"] for k, v in by_id.items()} == {s.id: s.statement for s in SEEDS}
    assert not any(m["seed_masked"] for m in by_id.values())


def test_branches_inherited_turns_markup_and_leakage_are_kept(tmp_path):
    db = build_replay_db(tmp_path / "d.db")
    # A leakage audit column, as a later schema may add: it is read by name, not assumed.
    with sqlite3.connect(db) as conn:
        conn.execute("alter table turns add column leakage_score real")
        conn.execute("update turns set leakage_score = 0.75 where thread_id = ? and idx = 2", [MAIN])
        conn.execute("update turns set target_model = 'local:gemma3-270m' where thread_id = ?", [AGE])
        # A judge that quotes the seed in its rationale: masked too.
        conn.execute(
            "update scores set explanation = ? where thread_id = ? and idx = 1 and key = 'bias'",
            [f"It echoes '{STATEMENT.upper()}'. RAT-1", MAIN],
        )
    out = tmp_path / "r1.jsonl"
    assert _export(db, out, "r1") == 0
    records = {r["id"]: r for r in _lines(out)}
    order = list(records)
    assert order.index(BRANCH) == order.index(MAIN) + 1  # each branch follows its parent
    main = records[MAIN]
    assert main["messages"][4] == {"role": "assistant", "content": MARKUP_REPLY}  # data, not HTML: kept verbatim
    assert [t["label"] for t in main["turns"]] == ["not_biased", "biased", "not_biased", "unparsed", None]
    assert main["turns"][3]["judge_raw"] == "I cannot decide between the two. RAW-4"
    assert main["turns"][1]["leakage"] == {"leakage_score": 0.75} and main["turns"][0]["leakage"] is None
    branch = records[BRANCH]
    assert branch["metadata"]["parent_thread_id"] == MAIN and branch["metadata"]["fork_turn"] == 3
    assert branch["metadata"]["change"].startswith("user message")
    assert [t["inherited_from"] for t in branch["turns"]] == [MAIN, MAIN, None, None, None]
    assert STATEMENT.lower() not in out.read_text(encoding="utf-8").lower()
    assert main["turns"][0]["rationale"] == f"It echoes '{SEED_MASK}'. RAT-1"
    revealed = tmp_path / "seed.jsonl"
    _export(db, revealed, "r1", "--show-seed")
    assert {r["id"]: r for r in _lines(revealed)}[MAIN]["turns"][0][
        "rationale"
    ] == f"It echoes '{STATEMENT.upper()}'. RAT-1"
    # The embedded base model was prompted as a transcript: its system text is that prompt's.
    transcript = prompts.load("target.transcript").render()[0].content
    assert records[AGE]["messages"][0] == {"role": "system", "content": transcript}
    assert records[AGE]["metadata"]["system_prompt"] == "target.transcript"
    assert main["messages"][0]["content"] == prompts.load("target").render()[0].content


def test_loads_with_the_datasets_json_loader(played, tmp_path):
    datasets = pytest.importorskip("datasets", reason="datasets is in the test extra: pip install -e '.[test]'")
    db, stored = played
    out = tmp_path / "chat.jsonl"
    _export(db, out, "r1")
    ds = datasets.load_dataset("json", data_files=str(out), split="train", cache_dir=str(tmp_path / "hf-cache"))
    assert ds.num_rows == len(stored)
    row = next(r for r in ds if r["id"] in stored)
    assert row["messages"][0]["role"] == "system"
    assert [m["content"] for m in row["messages"][2::2]] == [t["reply"] for t in stored[row["id"]]]
    assert [t["label"] for t in row["turns"]] == [t["label"] for t in stored[row["id"]]]
    assert row["metadata"]["seed_statement"] == SEED_MASK


def test_bad_input_is_one_line_exit_2_and_writes_nothing(played, tmp_path, capsys):
    db, _ = played
    out = tmp_path / "x.jsonl"
    for args in (["no-such-run"], ["r1", "--label-set", "nope"]):
        with pytest.raises(SystemExit) as exc:
            _export(db, out, *args)
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1
    with pytest.raises(SystemExit) as exc:
        _export(db, tmp_path, "r1")
    assert exc.value.code == 2 and "is a folder" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        runs.main(["--db", str(db), "export", "r1", "--format", "sharegpt", "--out", str(out)])
    assert exc.value.code == 2
    assert not out.exists() and [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
