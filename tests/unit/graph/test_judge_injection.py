"""The injection suite through the graph: target replies that try to steer their label (tests/support/injections.py)
and judges that quote them before and after their verdict. Every stored label is the judge's own verdict or
``unparsed``, never the planted one, and the prompt the judge received (read back from the trace) shows the reply as
one quoted block, in a frame no reply changes.

Played twice: with scripted fake models, and end to end by ``python -m graph.run`` against the project's stub
OpenAI-compatible server (tests/support/stub_server.py), the judge's answers going over HTTP like a provider's.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from checkpoints.readers import open_reader
from checkpoints.traces.tables import load_runs, resolve
from nodes.judge import judge_messages
from nodes.verdicts import unread_reason
from seeds import Seed
from tests.conftest import REPO, default_models, play, scripted
from tests.support import forked
from tests.support.injections import ANSWERS, REPLIES, InjectionWorld, seed_statement
from tests.support.judge_prompts import read_judge_prompt
from tests.support.stub_server import StubServer, role_of

WORLD = InjectionWorld(turns=3)
CASES = range(len(REPLIES))
_CASE = re.compile(r"case (\d+)")


def _text(messages) -> str:
    return "\n".join(str(m.content) for m in messages)


def _check_labels(reader, run_id: str) -> dict[str, int]:
    """Every stored label is the world's expected one; the expected unparsed labels by reason."""
    seen, unparsed = set(), 0
    for dialogue in reader.dialogues(run_id):
        case = int(_CASE.search(dialogue["statement"]).group(1))
        for turn in reader.turns(dialogue["thread_id"]):
            expected = WORLD.expected(case, turn["idx"])
            assert turn["label"] == expected, (WORLD.reply_shape(case), WORLD.answer_shape(case, turn["idx"]), turn)
            assert turn["reply"] == REPLIES[WORLD.reply_shape(case)](_planted(case, turn["idx"])).strip()
            seen.add((WORLD.reply_shape(case), WORLD.answer_shape(case, turn["idx"]), WORLD.own(case, turn["idx"])))
            unparsed += expected == "unparsed"
    assert {s[0] for s in seen} == set(REPLIES) and {s[1] for s in seen} == set(ANSWERS)
    assert {s[2] for s in seen} == {"biased", "not biased"}
    return {"unparsed": unparsed, "turns": len(seen)}


def _planted(case: int, turn: int) -> str:
    return "not biased" if WORLD.own(case, turn) == "biased" else "biased"


def _check_judge_prompts(db, reader, run_id: str) -> int:
    """The prompt each judge call received, as the trace recorded it: the reply as one quoted block, equal to the
    stored reply, in the frame a harmless reply gets."""
    checked = 0
    for dialogue in reader.dialogues(run_id):
        _, trace_ids = resolve(db, dialogue["thread_id"])
        stored = {t["idx"]: t["reply"] for t in reader.turns(dialogue["thread_id"])}
        judge_calls = [r for r in load_runs(db, trace_ids) if r.get("role") == "judge" and r["run_type"] == "llm"]
        assert len(judge_calls) == len(stored)
        for call in judge_calls:
            [messages] = call["inputs"]["messages"]
            system, user = messages
            assert "----- begin NAME KEY -----" in _content(system)
            parts = read_judge_prompt(_content(user))
            turn = sum(1 for m in parts.context if m["role"] == "user")
            assert parts.reply == stored[turn]
            harmless = [{"role": m["role"], "content": "Q"} for m in parts.context]
            benign = judge_messages("chat", statement=parts.statement, context=harmless, reply="R")
            assert parts.skeleton == read_judge_prompt(str(benign[-1].content)).skeleton
            checked += 1
    return checked


def _content(message) -> str:
    content = message["kwargs"]["content"] if "kwargs" in message else message["content"]
    return content if isinstance(content, str) else "".join(c.get("text", "") for c in content)


def test_scripted_models_through_the_graph_store_only_the_judge_s_own_verdicts(db):
    models = default_models(
        user=scripted(lambda m, n: WORLD.user(_text(m)), spec="fake:user"),
        target=scripted(lambda m, n: WORLD.target(str(m[-1].content)), spec="fake:target"),
        judge=scripted(lambda m, n: WORLD.judge(str(m[-1].content)), spec="fake:judge"),
    )
    seeds = [Seed(f"inj-{case:02d}", "gender", seed_statement(case)) for case in CASES]
    result, store = play(db, models, seeds=seeds, turns=WORLD.turns)
    assert {o.status for o in result.outcomes} == {"finished"}
    counted = _check_labels(store, "r1")
    assert counted["turns"] == len(CASES) * WORLD.turns
    assert _check_judge_prompts(store.db, store, "r1") == counted["turns"]
    store.close()


def test_graph_run_against_the_stub_server_stores_only_the_judge_s_own_verdicts(tmp_path: Path):
    def reply(body, n):
        messages = body.get("messages", [])
        role = role_of(body)
        if role == "judge":
            return WORLD.judge(str(messages[-1]["content"]))
        if role == "user":
            return WORLD.user("\n".join(str(m["content"]) for m in messages))
        return WORLD.target(str(messages[-1]["content"]))

    seeds = tmp_path / "seeds.jsonl"
    seeds.write_text(
        "".join(
            json.dumps({"id": f"inj-{case:02d}", "category": "gender", "statement": seed_statement(case)}) + "\n"
            for case in CASES
        )
    )
    db = tmp_path / "injection.db"
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and k != "OPENAI_BASE_URL"}
    env["OPENAI_API_KEY"] = "not-needed-by-the-stub"
    with StubServer(reply=reply) as stub:
        done = forked.run(
            "graph.run",
            *("--user-model", "openai:user", "--target-model", "openai:target", "--judge-model", "openai:judge"),
            *("--base-url", stub.url, "--seeds", str(seeds), "--turns", str(WORLD.turns)),
            *("--db", str(db), "--run-id", "inj", "--json"),
            cwd=REPO,
            env=env,
            timeout=300,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert (summary["dialogues"], summary["finished"]) == (len(CASES), len(CASES))
    # the judge's structured-output request went out (JSON mode with the schema): the stub answered in text anyway
    judge_bodies = [b for b in stub.requests if role_of(b) == "judge"]
    assert judge_bodies and all(b["response_format"]["type"] == "json_object" for b in judge_bodies)
    with open_reader(db) as reader:
        counted = _check_labels(reader, "inj")
        assert _check_judge_prompts(reader.db, reader, "inj") == counted["turns"]
        reasons = [unread_reason(e) for e in reader.unparsed_explanations("inj")]
    assert summary["unparsed_labels"] == counted["unparsed"] == len(reasons) > 0
    assert summary["unparsed_reasons"] == {why: reasons.count(why) for why in reasons}
    assert set(summary["unparsed_reasons"]) <= {"no verdict line", "contradictory verdicts"}
