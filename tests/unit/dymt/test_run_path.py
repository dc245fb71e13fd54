"""The run path that docs/architecture.md counts, from ``dymt.run`` to LangGraph's ``graph.astream``, checked against
the code: each named step calls the next in its own body, through nothing but the helpers the page says only carry
the call."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
MAX_STEPS = 4
# where the steps' names are looked up ("Invocation.play": a class of one of these, then its method)
MODULES = ("dymt", "dymt.session", "dymt.running", "graph.running.playing", "graph.running.endpoints")


def documented_path() -> tuple[int, list[str], set[str]]:
    """(the count the page says, the steps it names, the helpers it says only carry the call)."""
    text = " ".join((ROOT / "docs" / "architecture.md").read_text().split())
    said = r"From `dymt\.run` to LangGraph's `graph\.astream` there are (\d+) named steps: (.*?) Each step"
    found = re.search(said, text)
    assert found, "docs/architecture.md no longer counts the steps from dymt.run to graph.astream"
    steps = [re.search(r"`([\w.]+)`", part).group(1) for part in found.group(2).split("→")]  # type: ignore[union-attr]
    carried = re.search(r"only carry the call: (.*?)\. ", text)
    assert carried, "docs/architecture.md no longer names the helpers that only carry the call"
    return int(found.group(1)), steps, set(re.findall(r"`(\w+)` \(", carried.group(1)))


def resolve(name: str):
    head, _, tail = name.rpartition(".")
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        owner = module if not head else (module if module_name == head else getattr(module, head, None))
        if owner is not None and hasattr(owner, tail):
            return inspect.unwrap(getattr(owner, tail))
    raise AssertionError(f"docs/architecture.md names {name}, which is nowhere in {', '.join(MODULES)}")


def _called_name(call: ast.Call) -> str | None:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def reaches(source: str, callee: str, carriers: set[str]) -> list[str]:
    """How the function in ``source`` reaches a call of ``callee``: [] when it calls it in its own body (closures and
    lambdas in it included) directly or through a carrier; else what it goes through instead."""
    tree = ast.parse(textwrap.dedent(source))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and _called_name(n) == callee]
    if not calls:
        return [f"no call of {callee}"]
    wrappers = []
    for call in calls:
        node: ast.AST = call
        while node in parents:
            up = parents[node]
            if isinstance(up, ast.Call) and node is not up.func:  # handed to another function, which calls it
                if (outer := _called_name(up)) not in carriers:
                    wrappers.append(f"{callee} handed to {outer}")
            node = up
    return wrappers if len(wrappers) == len(calls) else []


def test_the_run_path_has_at_most_four_named_steps_each_calling_the_next():
    count, steps, carriers = documented_path()
    assert count == len(steps), f"docs/architecture.md says {count} named steps and lists {len(steps)}: {steps}"
    assert count <= MAX_STEPS, steps
    assert steps[0] == "dymt.run"
    functions = [resolve(step) for step in steps]
    for step, function, callee in zip(steps, functions, [*steps[1:], "graph.astream"], strict=True):
        wrong = reaches(inspect.getsource(function), callee.rpartition(".")[2], carriers)
        assert not wrong, f"{step} does not call {callee} itself: {wrong} (a step docs/architecture.md does not count)"


def test_the_check_sees_a_layer_that_wraps_the_next_step():
    wrapped = """
async def play(self):
    return await stop_on_wrong_setting(self._play_here(slots), policy.setting_failures)
"""
    assert reaches(wrapped, "_play_here", {"run_coroutine"}) == ["_play_here handed to stop_on_wrong_setting"]
    assert reaches(wrapped, "_play_here", {"stop_on_wrong_setting"}) == []
    layered = "def play(self):\n    return self._play_here()\n"
    assert reaches(layered, "execute_run", set()) == ["no call of execute_run"]
    inline = """
async def execute_run(config):
    async def one(seed):
        return await play_through_outages(outage, lambda: play_dialogue(graph, seed))
    return await asyncio.gather(*(one(s) for s in seeds))
"""
    assert reaches(inline, "play_dialogue", {"play_through_outages"}) == []
    assert reaches(inline, "play_dialogue", set()) == ["play_dialogue handed to play_through_outages"]


@pytest.mark.parametrize("helper", ["run_coroutine", "play_through_outages"])
def test_the_helpers_said_to_carry_the_call_exist(helper):
    _, _, carriers = documented_path()
    assert helper in carriers
    modules = ("dymt.running", "checkpoints.store_outage")
    assert any(hasattr(importlib.import_module(m), helper) for m in modules)
