"""Benchmark 3, the embedded model: generated tokens per second through the graph ÷ raw llama-cpp-python.

The graph side is a real run (``local:gemma3-270m`` in all three roles, checkpoints,
store, response cache and tracing on, one dialogue at a time). Every llama.cpp call the
adapter makes is replayed at once, call by call, on raw ``llama_cpp.Llama`` contexts laid
out the same way (one per role, fed the same prompts in the same order, so they reuse the
same prefixes): the exact prompt text, stop sequences, sampling settings and seed.

Why call by call: on a shared machine, another process running llama.cpp slows it down
twenty-fold for a minute at a time; measuring the two sides back to back puts both in
the same conditions. The raw calls' time is subtracted from the graph's wall-clock time,
so "through the graph" still includes everything the harness does around the model.
Model loading is outside both timings.
"""

from __future__ import annotations

import contextlib
import io
import os
import statistics
import time
from typing import Any

from benchmarks.common import play_run, run_async, scratch_dir
from checkpoints.cache import ResponseCache
from models.call_policy import CallPolicy
from models.registry import Sampling, create_role_model
from nodes.context import Models
from seeds import load_seeds

TURNS = 3
DIALOGUES = 4
TARGET_RATIO = 0.9
# As examples/offline.toml: short user and target lines.
SAMPLING = {"user": (0.7, 60), "target": (0.7, 80), "judge": (0.0, 250)}


def _models(policy: CallPolicy) -> Models:
    return Models(
        **{
            role: create_role_model(
                "local:gemma3-270m",
                role=role,  # type: ignore[arg-type]
                sampling=Sampling(temperature=t, max_tokens=n, seed=0),
                policy=policy,
            )
            for role, (t, n) in SAMPLING.items()
        }
    )


class Recorder:
    """Wraps the adapter's llama.cpp call: records it, then replays it on raw llama.cpp at once."""

    def __init__(self, raw: dict[str, Any]) -> None:
        self.raw = raw
        self.calls: list[dict[str, Any]] = []

    @contextlib.contextmanager
    def installed(self):
        from models.llama import model as local_model

        original = local_model.LlamaTranscriptChatModel._generate
        recorder = self

        def recorded(self, messages, stop=None, run_manager=None, **kwargs):
            start = time.perf_counter()
            result = original(self, messages, stop, run_manager, **kwargs)
            adapter_s = time.perf_counter() - start
            message = result.generations[0].message
            usage = message.usage_metadata or {}
            call = {
                "instance": self.instance_key,
                "prompt": self.render(messages),
                "stop": self.stop_sequences(stop),
                "max_tokens": kwargs.get("max_tokens", self.max_tokens),
                "temperature": kwargs.get("temperature", self.temperature),
                "repeat_penalty": kwargs.get("repeat_penalty", self.repeat_penalty),
                "seed": message.response_metadata.get("seed"),
                "text": message.content,
                "output_tokens": usage.get("output_tokens", 0),
                "input_tokens": usage.get("input_tokens", 0),
                "cache_read": (usage.get("input_token_details") or {}).get("cache_read", 0),
                "adapter_s": adapter_s,
            }
            call.update(recorder.replay(call))
            recorder.calls.append(call)
            return result

        local_model.LlamaTranscriptChatModel._generate = recorded
        try:
            yield self
        finally:
            local_model.LlamaTranscriptChatModel._generate = original

    def replay(self, call: dict[str, Any]) -> dict[str, Any]:
        from models.llama.instance import _common_prefix

        llama = self.raw[call["instance"]]
        prompt_tokens = llama.tokenize(call["prompt"].encode("utf-8"), add_bos=True, special=True)
        reused = _common_prefix(llama.input_ids[: llama.n_tokens].tolist(), prompt_tokens)
        start = time.perf_counter()
        out = llama.create_completion(
            call["prompt"],
            max_tokens=call["max_tokens"],
            temperature=call["temperature"],
            repeat_penalty=call["repeat_penalty"],
            seed=call["seed"],
            stop=call["stop"],
        )
        raw_s = time.perf_counter() - start
        return {
            "raw_s": raw_s,
            "raw_tokens": out["usage"]["completion_tokens"],
            "raw_reused": reused,
            "identical": out["choices"][0]["text"].strip() == call["text"],
            "replay_total_s": time.perf_counter() - start,
        }


def _raw_contexts(models: Models) -> dict[str, Any]:
    """Fresh llama.cpp contexts with the adapter's settings, one per role."""
    from llama_cpp import Llama

    contexts = {}
    for role in SAMPLING:
        inner = getattr(models, role).chat.inner
        with contextlib.redirect_stderr(io.StringIO()):
            llama = Llama(model_path=inner.model_path, n_ctx=inner.n_ctx, n_threads=os.cpu_count(), verbose=False)
        llama.create_completion("Warm up.", max_tokens=2)
        contexts[inner.instance_key] = llama
    return contexts


def run() -> dict[str, Any]:
    seeds = load_seeds("builtin", per_category=1)
    with scratch_dir() as tmp:
        db = tmp / "bench.db"
        policy = CallPolicy(cache=ResponseCache(db))
        models = _models(policy)
        # Warm-up: load the adapter's contexts (and import everything) outside the timings.
        run_async(play_run(db, models, seeds[-1:], turns=1, run_id="warm-up"))
        recorder = Recorder(_raw_contexts(models))
        with recorder.installed():
            result, timing = run_async(
                play_run(db, models, seeds[:DIALOGUES], turns=TURNS, concurrency=1, trace=True, run_id="bench")
            )
        policy.cache.close()  # type: ignore[union-attr]
    failed = [o for o in result.outcomes if o.status != "finished"]
    if failed:
        raise RuntimeError(f"{len(failed)} dialogues failed through the graph, first: {failed[0].error}")
    calls = recorder.calls
    replay_s = sum(c["replay_total_s"] for c in calls)
    graph_s = timing.wall - replay_s
    graph_tokens = sum(c["output_tokens"] for c in calls)
    raw_s = sum(c["raw_s"] for c in calls)
    raw_tokens = sum(c["raw_tokens"] for c in calls)
    adapter_s = sum(c["adapter_s"] for c in calls)
    generating = [c for c in calls if c["output_tokens"] > 1 and c["raw_tokens"] > 1]
    per_call = [(c["output_tokens"] / c["adapter_s"]) / (c["raw_tokens"] / c["raw_s"]) for c in generating]
    prompt_tokens = sum(c["input_tokens"] for c in calls)
    return {
        "dialogues": DIALOGUES,
        "turns": TURNS,
        "calls": len(calls),
        "graph_s": graph_s,
        "graph_tokens": graph_tokens,
        "graph_tokens_per_s": graph_tokens / graph_s,
        "adapter_s": adapter_s,
        "raw_s": raw_s,
        "raw_tokens": raw_tokens,
        "raw_tokens_per_s": raw_tokens / raw_s,
        "ratio": (graph_tokens / graph_s) / (raw_tokens / raw_s),
        "adapter_ratio": (graph_tokens / adapter_s) / (raw_tokens / raw_s),
        "median_call_ratio": statistics.median(per_call) if per_call else None,
        "harness_share": 1 - adapter_s / graph_s,
        "identical": sum(c["identical"] for c in calls),
        "target_ratio": TARGET_RATIO,
        "prompt_tokens": prompt_tokens,
        "graph_prefix_reuse": sum(c["cache_read"] for c in calls) / max(1, prompt_tokens),
        "raw_prefix_reuse": sum(c["raw_reused"] for c in calls) / max(1, prompt_tokens),
    }


def report(r: dict[str, Any]) -> list[str]:
    verdict = "ok" if r["ratio"] >= r["target_ratio"] else "BELOW TARGET"
    median = "–" if r["median_call_ratio"] is None else f"{r['median_call_ratio']:.3f}"
    return [
        f"{r['dialogues']} dialogues × {r['turns']} turns on local:gemma3-270m, {r['calls']} llama.cpp calls, "
        f"target ≥ {r['target_ratio']}",
        f"  through the graph: {r['graph_tokens']} tokens in {r['graph_s']:.1f} s = {r['graph_tokens_per_s']:.1f} "
        "tokens/s "
        f"({100 * r['harness_share']:.0f}% of it outside llama.cpp calls)",
        f"  raw llama-cpp-python, same prompts: {r['raw_tokens']} tokens in {r['raw_s']:.1f} s = "
        f"{r['raw_tokens_per_s']:.1f} tokens/s",
        f"  ratio {r['ratio']:.3f} ({verdict}); adapter calls alone {r['adapter_ratio']:.3f}, median per call "
        f"{median}; "
        f"identical outputs {r['identical']}/{r['calls']}",
        f"  prompt prefix reused from the role's previous call: {100 * r['graph_prefix_reuse']:.0f}% of "
        f"{r['prompt_tokens']} prompt tokens through the graph, {100 * r['raw_prefix_reuse']:.0f}% raw",
    ]
