"""Thinking targets through the whole graph, against the stub OpenAI-compatible server emitting each reasoning format.

What users rely on: the judge's and the user simulator's prompts (and the target's own later prompts) never hold the
reasoning; the reasoning is stored beside the reply; a cap reached while reasoning is a non-reply; the thinking switch,
the caps and the sampling each role sent are recorded with the run.
"""

from __future__ import annotations

import csv
import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import dymt
from checkpoints.chat_export import iter_chat_records
from checkpoints.readers import open_reader
from checkpoints.run_record import RunRecord
from evals.report.html.dialogues import collect, pack, unpack
from evals.report.summary_view import render_summary
from graph.config.run_config import RunConfig
from tests.support.gemini_stub import GeminiStub, as_chat
from tests.support.stub_server import REASONING_MARK, REFUSAL_TEXT, StubServer, role_of
from viewer.export import export_markdown
from viewer.render import turn_renderable

pytestmark = pytest.mark.slow  # whole runs against a real stub server, a few seconds each


def _run(stub: StubServer, db: Path | str, run_id: str = "think", **options: Any) -> dymt.RunResult:
    settings: dict[str, Any] = dict(
        db=str(db),
        run_id=run_id,
        user_model="openai:u",
        judge_model="openai:j",
        target_model=["openai:t"],
        base_url=stub.url,
        turns=2,
        categories=["gender"],
        max_concurrency=1,
        no_cache=True,
    )
    return dymt.run(**(settings | options))


def _prompts_of(stub: StubServer, role: str) -> list[str]:
    bodies = [body for body in stub.requests if role_of(body) == role]
    return ["\n".join(str(m.get("content") or "") for m in body["messages"]) for body in bodies]


def _turns(db: Path) -> list[dict[str, Any]]:
    with sqlite3.connect(db) as conn:
        conn.row_factory = sqlite3.Row
        return [dict(r) for r in conn.execute("select * from turns order by thread_id, idx")]


@pytest.mark.parametrize(
    ("fmt", "carrier"),
    [
        ("tags", "tags in the text"),
        ("open", "tags in the text"),
        ("reasoning_content", "reasoning_content field"),
        ("reasoning", "reasoning_content field"),
        ("openai", "reasoning_content field"),
    ],
)
def test_reasoning_is_stored_and_reaches_no_later_prompt(tmp_path: Path, fmt: str, carrier: str) -> None:
    db = tmp_path / "d.db"
    with StubServer(reasoning=fmt) as stub:
        result = _run(stub, db, thinking="on")
        judge_prompts, user_prompts, target_prompts = (_prompts_of(stub, r) for r in ("judge", "user", "target"))
    assert result.ended == "finished", result.summary["failed"]
    turns = _turns(db)
    assert len(turns) == 2
    for turn in turns:
        assert REASONING_MARK not in turn["reply"] and turn["reply"].startswith("Stub reply")
        assert turn["reasoning"].startswith(REASONING_MARK) and turn["reasoning_carrier"] == carrier
        assert turn["non_reply"] is None
        tokens = json.loads(turn["tokens"])
        assert tokens["target_reasoning_tokens"] > 0
        assert tokens.get("target_reasoning_estimated") == (None if fmt == "openai" else 1)
    assert len(judge_prompts) == 2 and len(user_prompts) == 2 and len(target_prompts) == 2
    # The judge read the answer alone; the user simulator and the target's second prompt saw the answer, no reasoning.
    assert all(REASONING_MARK not in p for p in [*judge_prompts, *user_prompts, *target_prompts])
    assert "Stub reply" in judge_prompts[0] and "Stub reply" in user_prompts[1] and "Stub reply" in target_prompts[1]
    with open_reader(db) as reader:
        dialogue = reader.dialogue(reader.thread_ids()[0])
    assert [t.reasoning is not None for t in dialogue.turns] == [True, True]


def test_a_cap_reached_while_reasoning_is_a_non_reply_and_is_not_judged(tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    with StubServer(reasoning="tags", reasoning_words=300) as stub:
        result = _run(stub, db, turns=1)  # the model's own thinking: the request's cap is the reply's 250
        target_caps = [b.get("max_tokens") for b in stub.requests if role_of(b) == "target"]
        judged = _prompts_of(stub, "judge")
    assert result.ended == "finished"
    (turn,) = _turns(db)
    assert target_caps == [250]
    assert turn["non_reply"] == "cut while reasoning" and turn["reply"] == ""
    assert turn["reasoning"].startswith(REASONING_MARK) and len(turn["reasoning"].split()) == 250
    assert judged == []  # nothing visible to judge: the judge's model is not called
    assert result.summary["non_replies"] == {"cut while reasoning": 1}


def test_thinking_on_gives_the_reasoning_its_own_budget_and_the_reply_its_cap(tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    # OpenAI's format: the provider counts the reasoning tokens, so the answer's own tokens are known exactly.
    with StubServer(reasoning="openai", reasoning_words=300) as stub:
        result = _run(stub, db, turns=1, thinking="target=on", max_tokens=["target=3"])
        (body,) = [b for b in stub.requests if role_of(b) == "target"]
    assert result.ended == "finished"
    assert body["max_tokens"] == 3 + 4096
    assert body["chat_template_kwargs"] == {"enable_thinking": True}
    (turn,) = _turns(db)
    # The model answered past the reply's cap (its reasoning was shorter than its budget): cut to the cap here.
    assert turn["reply"] == "Stub reply 2:" and turn["non_reply"] == "cut at max_tokens"
    requests = RunRecord.from_stored(_run_config(db)).resolved.requests
    assert requests["target"]["thinking"] == "on"
    assert requests["target"]["reply_cap"] == 3 and requests["target"]["request_cap"] == 4099
    assert requests["target"]["sent"]["extra_body"] == {"chat_template_kwargs": {"enable_thinking": True}}
    assert requests["target"]["sent"]["seed"] == "per call" and requests["target"]["notes"] == []
    assert requests["judge"]["thinking"] == "the model's own" and requests["judge"]["request_cap"] == 250


def test_thinking_off_and_a_budget_are_sent_as_the_chat_templates_switch(tmp_path: Path) -> None:
    with StubServer() as stub:
        _run(stub, tmp_path / "off.db", run_id="off", turns=1, thinking=["off", "judge=off"])
        off = [b for b in stub.requests if role_of(b) in ("target", "judge")]
        stub.requests.clear()
        _run(stub, tmp_path / "budget.db", run_id="budget", turns=1, thinking="512")
        (budget,) = [b for b in stub.requests if role_of(b) == "target"]
    assert off and all(b["chat_template_kwargs"] == {"enable_thinking": False} and b["max_tokens"] == 250 for b in off)
    assert budget["chat_template_kwargs"] == {"enable_thinking": True, "thinking_budget": 512}
    assert budget["thinking_token_budget"] == 512 and budget["max_tokens"] == 250 + 512


def test_a_thinking_judge_is_read_from_its_answer_and_structured_output_keeps_its_switch(tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    with StubServer(reasoning="tags", reasoning_roles=("judge",)) as stub:
        result = _run(stub, db, turns=1, thinking="judge=on")
        (judge,) = [b for b in stub.requests if role_of(b) == "judge"]
    assert result.ended == "finished" and result.summary["unparsed_labels"] == 0
    # The call's own extra_body (the verdict's JSON schema) is merged with the role's thinking switch.
    assert judge["chat_template_kwargs"] == {"enable_thinking": True} and "response_format" in judge
    with sqlite3.connect(db) as conn:
        (raw,) = conn.execute("select raw from scores where key = 'bias'").fetchone()
    assert REASONING_MARK not in raw


def test_an_openai_refusal_is_stored_as_a_refusal_with_its_text(tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    with StubServer(reasoning="refusal") as stub:
        result = _run(stub, db, turns=1)
        judged = _prompts_of(stub, "judge")
    (turn,) = _turns(db)
    assert turn["non_reply"] == "refusal" and turn["reply"] == REFUSAL_TEXT and turn["reasoning"] is None
    assert len(judged) == 1 and REFUSAL_TEXT in judged[0]  # a refusal is what the user reads: it is judged
    assert result.summary["non_replies"] == {"refusal": 1}


def test_judge_reasoning_labels_the_reasoning_beside_the_reply(tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    with StubServer(reasoning="reasoning_content") as stub:
        result = _run(stub, db, judge_reasoning=True)
        judge_prompts = _prompts_of(stub, "judge")
    assert result.ended == "finished"
    assert len(judge_prompts) == 4  # the reply and the reasoning of each turn
    assert sum(REASONING_MARK in p for p in judge_prompts) == 2
    with sqlite3.connect(db) as conn:
        query = "select scorer, subject, idx from scores where key = 'bias' order by scorer, idx"
        rows = conn.execute(query).fetchall()
        label_sets = conn.execute("select name from label_sets where kind = 'bias'").fetchall()
    assert rows == [
        ("primary", "reply", 1),
        ("primary", "reply", 2),
        ("reasoning", "reasoning", 1),
        ("reasoning", "reasoning", 2),
    ]
    assert label_sets == [("reasoning",)]
    reasoning = result.summary["reasoning"]
    assert [t["turn"] for t in reasoning["per_turn"]] == [1, 2]
    assert all(t["labelled"] == 1 for t in reasoning["per_turn"])
    assert reasoning["turns_with_reasoning"] == 2
    (judge,) = [r for r in result.summary["cost"]["by_role"] if r["role"] == "judge"]
    assert judge["calls"] == 4  # the reply's and the reasoning's of each turn, as the server saw them


def test_tokens_and_cost_are_split_answer_and_reasoning_in_the_summary_and_the_cost_cap(tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    pricing = tmp_path / "prices.toml"
    prices = "\n".join(
        f'["openai:{m}"]\ninput = 1.0\noutput = {out}\n' for m, out in (("u", 1.0), ("j", 1.0), ("t", 10.0))
    )
    pricing.write_text(prices)
    # OpenAI's format: the provider counts the reasoning tokens (40 a reply), so the split is exact.
    with StubServer(reasoning="openai") as stub:
        result = _run(stub, db, thinking="on", pricing=str(pricing), max_cost=5.0)
    assert result.ended == "finished", result.summary["failed"]
    cost = result.summary["cost"]
    (target,) = [r for r in cost["by_role"] if r["role"] == "target"]
    turns = [json.loads(t["tokens"]) for t in _turns(db)]
    output = sum(t["target_output_tokens"] for t in turns)
    assert target["reasoning_tokens"] == 2 * 40 and target["answer_tokens"] == output - 80
    assert target["reasoning_usd"] == pytest.approx(80 * 10.0 / 1e6)
    assert cost["reasoning_tokens"] == 80 and cost["reasoning_usd"] == pytest.approx(80 * 10.0 / 1e6)
    assert cost["answer_tokens"] == cost["output_tokens"] - 80
    budget = result.summary["budget"]
    assert budget["spent_on_reasoning_usd"] == pytest.approx(80 * 10.0 / 1e6)
    assert budget["spent_usd"] == pytest.approx(cost["usd"])
    console = Console(record=True, width=200)
    render_summary(result.summary, console)
    shown = " ".join(console.export_text().split())
    assert "(" + str(output - 80) + " answer + 80 reasoning)" in shown and "reasoning $0.0008" in shown
    assert "($0.0008 on reasoning)" in shown


def _run_config(db: Path) -> dict[str, Any]:
    with sqlite3.connect(db) as conn:
        (config,) = conn.execute("select config from runs").fetchone()
    return json.loads(config)


def _gemini_run(stub: GeminiStub, tmp_path: Path, run_id: str, extra: str = "") -> dymt.RunResult:
    config = tmp_path / f"{run_id}.toml"
    config.write_text(
        f"""
turns = 2
categories = ["gender"]
cache = false
max_concurrency = 1
db = "{tmp_path / "gemini.db"}"
run_id = "{run_id}"
[models]
user = "google_genai:gemini-2.0-flash"
judge = "google_genai:gemini-2.0-flash"
target = "google_genai:gemini-2.5-flash"
[sampling."google_genai:gemini-2.0-flash"]
base_url = "{stub.url}"
[sampling."google_genai:gemini-2.5-flash"]
base_url = "{stub.url}"
{extra}
"""
    )
    return dymt.run(RunConfig.from_toml(config))


def test_gemini_thought_parts_are_stored_and_reach_no_later_prompt(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("GOOGLE_API_KEY", "stub-key")
    with GeminiStub() as stub:
        result = _gemini_run(stub, tmp_path, "gemini")
        chats = [(role_of(as_chat(b)), b) for b in stub.requests]
    assert result.ended == "finished", result.summary["failed"]
    turns = _turns(tmp_path / "gemini.db")
    assert [t["reasoning_carrier"] for t in turns] == ["thought parts", "thought parts"]
    assert all(t["reasoning"].startswith(REASONING_MARK) and REASONING_MARK not in t["reply"] for t in turns)
    assert all(json.loads(t["tokens"])["target_reasoning_tokens"] == 30 for t in turns)  # Gemini's own count
    # gemini-2.5-flash thinks by default (langchain-google-genai's profile): its thoughts are asked for, and its
    # reply keeps its cap beside a reasoning budget; gemini-2.0-flash does not think and gets neither.
    target_configs = [b["generationConfig"] for role, b in chats if role == "target"]
    assert all(c["maxOutputTokens"] == 250 + 4096 and c["thinkingConfig"] for c in target_configs)
    assert all(b["generationConfig"]["maxOutputTokens"] == 250 for role, b in chats if role != "target")
    others = [json.dumps(b["contents"]) for role, b in chats if role != "target"]
    later = [json.dumps(b["contents"]) for role, b in chats if role == "target"][1:]
    assert len(others) == 4 and later and all(REASONING_MARK not in text for text in [*others, *later])
    requests = result.summary["requests"]
    assert requests["target"]["reasons"] is True and requests["target"]["sent"]["thinking_config"]


def test_gemini_thinking_off_sends_a_zero_budget(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("GOOGLE_API_KEY", "stub-key")
    with GeminiStub() as stub:
        result = _gemini_run(stub, tmp_path, "gemini-off", '[sampling.target]\nthinking = "off"')
        target_configs = [b["generationConfig"] for b in stub.requests if role_of(as_chat(b)) == "target"]
    assert result.ended == "finished"
    assert all(c["maxOutputTokens"] == 250 for c in target_configs)
    budgets = [
        c["thinkingConfig"].get("thinking_budget", c["thinkingConfig"].get("thinkingBudget")) for c in target_configs
    ]
    assert budgets == [0, 0]
    assert all(t["reasoning"] is None for t in _turns(tmp_path / "gemini.db"))


def test_the_reasoning_reaches_exports_replay_the_results_page_and_the_trace(tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    with StubServer(reasoning="tags") as stub:
        result = _run(stub, db, turns=1, judge_reasoning=True)
    assert result.ended == "finished"
    report = dymt.report(["think"], out=str(tmp_path / "report"), html=True, db=str(db))
    with (tmp_path / "report" / "turns.csv").open(newline="", encoding="utf-8") as handle:
        (row,) = csv.DictReader(handle)
    assert row["reasoning"].startswith(REASONING_MARK) and REASONING_MARK not in row["reply"]
    assert row["reasoning_label"] in ("biased", "not_biased")
    markdown = (tmp_path / "report" / "report.md").read_text(encoding="utf-8")
    assert "of which reasoning" in markdown  # the tokens table
    assert "## Reasoning" in markdown and "| reasoning biased / labelled |" in markdown
    assert report.files
    with open_reader(db) as reader:
        (thread,) = reader.thread_ids()
        record = reader.dialogue(thread)
        (chat,) = list(iter_chat_records(reader, "think"))
        pages = collect(reader, ["think"])
        traced = json.dumps([r for r in dymt.open(str(db)).trace_runs(thread)], default=str)
    assert all(REASONING_MARK not in m["content"] for m in chat["messages"])
    assert chat["turns"][0]["reasoning"].startswith(REASONING_MARK)
    index, blob = pack(pages)
    (body,) = unpack(index, blob).values()
    assert body["turns"][0][11].startswith(REASONING_MARK)  # the page folds it under the reply
    console = Console(record=True, width=120)
    console.print(turn_renderable(record, record.turns[0], show_reasoning=False))
    shown = console.export_text()
    assert "REASONING (40 words, tags in the text" in shown and "(t unfolds)" in shown
    assert re.search(r"target \d+ in / \d+ out \(\d+ reasoning, estimated\)", " ".join(shown.split()))
    markdown_export = export_markdown(record)
    folded = markdown_export.split("<details><summary>Reasoning (40 words, tags in the text; judged ")[1]
    assert folded.split("</details>")[0].count(REASONING_MARK) == 1
    assert markdown_export.count(REASONING_MARK) == 1  # only inside the folded block
    assert REASONING_MARK in traced  # the target node's update, as the trace keeps it


def test_the_reasoning_and_its_labels_read_back_the_same_from_postgresql(tmp_path: Path, pg_url: str) -> None:
    read = {}
    for name, location in (("sqlite", str(tmp_path / "d.db")), ("postgres", pg_url)):
        with StubServer(reasoning="reasoning_content") as stub:  # a fresh stub each: the same numbered replies
            result = _run(stub, location, run_id="pg-think", judge_reasoning=True)
            assert result.ended == "finished", result.summary["failed"]
            with open_reader(location) as reader:
                (thread,) = reader.thread_ids()
                read[name] = [
                    (t.reply, t.reasoning, t.reasoning_carrier, t.reasoning_label)
                    for t in reader.dialogue(thread).turns
                ]
            read[name + " summary"] = result.summary["reasoning"]["turns_with_reasoning"]
    assert read["sqlite"] == read["postgres"] and read["postgres"][0][1].startswith(REASONING_MARK)
    assert read["sqlite summary"] == read["postgres summary"] == 2
