"""The typed records at module boundaries: thread and run ids, a mode's scripts, the stored run record, the cost cap."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from checkpoints.ids import DialogueThread, branch_parent, branch_thread_id, dialogue_thread_id, new_run_id, sample_of
from checkpoints.run_record import Resolved, RunRecord, role_specs, run_settings
from checkpoints.store import open_writer
from graph.config.run_config import RunConfig
from graph.config.stored import stored_run_config
from graph.running.playing import execute_run
from graph.running.run_records import run_identity
from nodes.builder import build_graph
from nodes.modes import ModeScripts, scripts_for
from tests.conftest import SEEDS, checkpointer, default_models, make_config


@pytest.mark.parametrize(
    "parts",
    [
        DialogueThread("r1", "builtin-gender-01", "implicit"),
        DialogueThread("run:with:colons", "s", "fairmt:negative_feedback"),
        DialogueThread("r", "s", "zero-shot", target="hf:org/model", sample=2),
        DialogueThread("r", "s", "fairmt:probing", target="openai:gpt-4o-mini"),
    ],
)
def test_a_dialogue_thread_id_reads_back_as_its_parts(parts):
    thread_id = dialogue_thread_id(parts.run_id, parts.seed_id, parts.mode, target=parts.target, sample=parts.sample)
    assert thread_id == parts.thread_id
    assert DialogueThread.parse(thread_id, run_id=parts.run_id) == parts


def test_thread_ids_keep_the_form_stored_runs_have():
    assert dialogue_thread_id("r", "s", "implicit") == "r:s:implicit"  # one target: as runs always were, so they resume
    assert dialogue_thread_id("r", "s", "implicit", target="hf:org/m", sample=2) == "r:s:implicit:hf:org/m#2"
    with pytest.raises(ValueError, match="not a dialogue thread id of run 'other'"):
        DialogueThread.parse("r:s:implicit", run_id="other")


def test_a_branch_id_names_its_parent_and_turn():
    parent = "r:s:implicit:hf:org/model#1"
    branch = branch_thread_id(parent, 3)
    assert re.fullmatch(re.escape(parent) + r"/t3-[0-9a-f]{6}", branch)
    assert branch_parent(branch) == (parent, 3)
    assert branch_parent(parent) is None  # a target spec's "/" is no branch
    assert sample_of(branch) == 0  # a branch is its own dialogue
    with pytest.raises(ValueError):
        DialogueThread.parse(branch, run_id="r")


def test_new_run_ids_are_fresh_and_dated():
    first, second = new_run_id(), new_run_id("branch")
    assert re.fullmatch(r"run-\d{8}-\d{6}-[0-9a-f]{4}", first)
    assert re.fullmatch(r"branch-\d{8}-\d{6}-[0-9a-f]{4}", second)


def test_a_modes_scripts_name_what_they_hold():
    zero_shot = scripts_for("zero-shot", SEEDS, fairmt_dir=None)
    assert zero_shot.plays(SEEDS[0].id) and SEEDS[0].statement in zero_shot.script(SEEDS[0].id)[0]
    assert zero_shot.unaligned == ()
    dynamic = scripts_for("implicit", SEEDS, fairmt_dir=None)
    assert dynamic == ModeScripts() and dynamic.script(SEEDS[0].id) is None and not dynamic.plays(SEEDS[0].id)


def test_the_stored_run_record_round_trips_and_keeps_its_json(db):
    config = make_config(run_id="r1")
    models = default_models()
    record = config.stored_record(models)
    assert isinstance(record.resolved, Resolved) and record.resolved.models["judge"] == models.judge.spec
    stored = json.loads(json.dumps(record.with_extra(unaligned_seeds=[]).to_stored()))
    assert list(stored) == ["run_config", "resolved", "unaligned_seeds"]
    assert set(stored["resolved"]) == {"models", "model_ids", "sampling", "prompt_files", "requests"}
    assert stored == json.loads(json.dumps(config.run_record(models))) | {
        "unaligned_seeds": []
    }  # the dict form, as before
    again = RunRecord.from_stored(stored)
    assert again.to_stored() == stored and again.run_id == "r1" and again.extra == {"unaligned_seeds": []}
    assert stored_run_config(again, run_id="r1") == stored_run_config(stored, run_id="r1")
    assert run_identity(again) == run_identity(stored)
    assert role_specs(stored) == again.resolved.models and run_settings(stored) == again.run_config


def test_an_old_spec_row_reads_as_a_typed_record():
    old = {
        "spec": {
            "run_id": "old",
            "mode": "implicit",
            "turns": 3,
            "models": {"user": "u:a", "target": "t:b", "judge": "j:c"},
            "model_ids": {"judge": "c-1"},
        },
        "unaligned_seeds": ["x"],
    }
    record = RunRecord.from_stored(old)
    assert record.resolved.models == {"user": "u:a", "target": "t:b", "judge": "j:c"}
    assert record.resolved.model_ids == {"judge": "c-1"}
    assert record.run_config["modes"] == ["implicit"] and record.run_config["run_id"] == "old"
    assert record.extra == {"unaligned_seeds": ["x"]}
    assert old["spec"]["run_id"] == "old"  # read, never rewritten


class _AtMostOne:
    """A budget that lets one dialogue start and holds back the rest (what CostCap does when its cap is spent)."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.ended_threads: list[str] = []

    def allows(self, store, thread_id: str) -> bool | None:
        self.asked.append(thread_id)
        return not self.ended_threads and len(self.asked) == 1

    def ended(self, store, thread_id: str) -> None:
        self.ended_threads.append(thread_id)


@pytest.mark.parametrize("as_pair", [False, True])
def test_a_typed_budget_holds_back_dialogues(db, as_pair):
    budget = _AtMostOne()
    store = open_writer(db)

    async def go():
        async with checkpointer(db) as saver:
            return await execute_run(
                make_config(turns=1),
                SEEDS,
                graph=build_graph(saver),
                store=store,
                models=default_models(),
                budget=(budget.allows, budget.ended) if as_pair else budget,
            )

    result = asyncio.run(go())
    assert [o.status for o in result.outcomes] == ["finished", "held"]
    assert budget.ended_threads == [result.outcomes[0].thread_id]
    assert store.get_run("r1")["status"] == "stopped"


def test_run_config_round_trips_through_its_record():
    config = RunConfig(run_id="r9", turns=2)
    record = config.stored_record(default_models())
    assert stored_run_config(record, run_id="r9").turns == 2
