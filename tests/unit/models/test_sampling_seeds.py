"""Per-call sampling seeds: reproducible, different for every call, part of the response-cache key."""

from __future__ import annotations

import asyncio
from pathlib import Path

from langchain_core.messages import HumanMessage

from checkpoints.cache import ResponseCache
from models.call_policy import CallPolicy
from models.registry import RoleModel, Sampling
from nodes.dialogue import call_seed
from tests.conftest import SEEDS, default_models, play
from tests.unit.nodes.test_leakage import SeededFake


def _model(spec: str, respond) -> RoleModel:
    return RoleModel(
        spec=spec, model_id=spec, chat=SeededFake(respond=respond, seeds=[]), style="chat", sampling=Sampling()
    )


def _models():
    return default_models(
        user=_model("fake:user", lambda m, n: f"Question {n}?"),
        target=_model("fake:target", lambda m, n: f"Answer {n}."),
        judge=_model("fake:judge", lambda m, n: "Rationale: r.\nLabel: not biased"),
    )


def test_every_call_gets_its_own_reproducible_seed(tmp_path: Path):
    first = _models()
    play(tmp_path / "a.db", first, seeds=SEEDS, turns=3)
    seeds = {role: getattr(first, role).chat.seeds for role in ("user", "target", "judge")}
    everything = [s for role_seeds in seeds.values() for s in role_seeds]
    assert len(everything) == 2 * 3 * 3 and None not in everything
    assert len(set(everything)) == len(everything)  # different for every call
    again = _models()
    play(tmp_path / "b.db", again, seeds=SEEDS, turns=3, run_id="another-run")
    # The same settings draw the same seeds, whatever the run id.
    assert {role: getattr(again, role).chat.seeds for role in seeds} == seeds


def test_call_seed_depends_on_every_part():
    base = call_seed(0, "s:implicit:t", 1, "user", 1)
    assert base == call_seed(0, "s:implicit:t", 1, "user", 1)
    variants = {
        call_seed(1, "s:implicit:t", 1, "user", 1),
        call_seed(0, "s2:implicit:t", 1, "user", 1),
        call_seed(0, "s:implicit:t", 2, "user", 1),
        call_seed(0, "s:implicit:t", 1, "target", 1),
        call_seed(0, "s:implicit:t", 1, "user", 2),
    }
    assert base not in variants and len(variants) == 5
    assert 0 <= base < 2**31


def test_the_response_cache_keys_on_the_call_seed(tmp_path: Path):
    from models.registry import cache_params

    cache = ResponseCache(tmp_path / "c.db")
    policy = CallPolicy(cache=cache)
    inner = SeededFake(respond=lambda m, n: f"reply {n}", seeds=[])
    model = policy.wrap(
        inner, spec="fake:x", provider="fake", role="target", cache_params=cache_params("fake:x", Sampling(), inner)
    )
    messages = [HumanMessage(content="same prompt")]

    async def go():
        a = await model.ainvoke(messages, seed=1)
        b = await model.ainvoke(messages, seed=2)
        c = await model.ainvoke(messages, seed=1)
        return a.content, b.content, c.content

    try:
        a, b, c = asyncio.run(go())
    finally:
        cache.close()
    assert (a, b, c) == ("reply 1", "reply 2", "reply 1")  # the third is a hit
    assert inner.seeds == [1, 2]


def test_a_provider_without_seeds_still_keys_the_cache_on_them(tmp_path: Path):
    from models.registry import cache_params

    cache = ResponseCache(tmp_path / "c.db")
    inner = SeededFake(respond=lambda m, n: f"reply {n}", seeds=[])
    model = CallPolicy(cache=cache).wrap(
        inner,
        spec="fake:x",
        provider="fake",
        role="user",
        seed_option=False,
        cache_params=cache_params("fake:x", Sampling(), inner),
    )

    async def go():
        return [(await model.ainvoke([HumanMessage(content="p")], seed=s)).content for s in (1, 2)]

    try:
        assert asyncio.run(go()) == ["reply 1", "reply 2"]
    finally:
        cache.close()
    assert inner.seeds == [None, None]  # never sent to the provider
