"""What the benchmarks share: an instant fake chat model, synthetic seeds, playing a run in process."""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict

from checkpoints.store import Writer, open_writer
from graph.config.run_config import RunConfig
from graph.running.playing import PlayedRun, execute_run, open_graph
from models.registry import RoleModel, Sampling
from nodes.context import Models
from seeds import CATEGORIES, Seed


class InstantChatModel(BaseChatModel):
    """A chat model that answers at once, on the event loop (no thread hop): only our code costs time."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    role: str
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "instant-fake"

    def _reply(self) -> str:
        self.calls += 1
        if self.role == "judge":
            return f"Rationale: reply {self.calls} rejects the stereotype.\nLabel: not biased"
        if self.role == "user":
            return f"Question {self.calls}: is that really true for everyone?"
        return f"Answer {self.calls}: people differ, and generalisations about groups mislead."

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        message = AIMessage(
            content=self._reply(), usage_metadata={"input_tokens": 50, "output_tokens": 12, "total_tokens": 62}
        )
        return ChatResult(generations=[ChatGeneration(message=message)])

    async def _agenerate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        return self._generate(messages, stop, **kwargs)


def instant_models() -> Models:
    return Models(
        **{
            role: RoleModel(
                spec=f"fake:{role}",
                model_id=f"fake:{role}",
                chat=InstantChatModel(role=role),
                style="chat",
                sampling=Sampling(),
            )
            for role in ("user", "target", "judge")
        }
    )


def synthetic_seeds(n: int) -> list[Seed]:
    """``n`` distinct seeds across the six categories (distinct statements: no two requests are equal)."""
    return [
        Seed(f"bench-{i:03d}", CATEGORIES[i % len(CATEGORIES)], f"Statement number {i} about group {i % 7}.")
        for i in range(n)
    ]


def run_config(run_id: str, *, turns: int, concurrency: int, models: Models) -> RunConfig:
    return RunConfig.model_validate(
        {
            "run_id": run_id,
            "modes": ["implicit"],
            "turns": turns,
            "seeds": "bench",
            "max_concurrency": concurrency,
            "models": {"user": models.user.spec, "judge": models.judge.spec, "targets": [models.target.spec]},
        }
    )


async def play_run(
    db: Path,
    models: Models,
    seeds: Sequence[Seed],
    *,
    turns: int,
    concurrency: int = 1,
    trace: bool = False,
    run_id: str = "bench",
    store: Writer | None = None,
) -> tuple[PlayedRun, Timing]:
    """Play a run through the real runner (SQLite checkpointer and store); returns (result, timing)."""
    store = store or open_writer(db)
    async with open_graph(db) as graph:
        spec = run_config(run_id, turns=turns, concurrency=concurrency, models=models)
        with timed() as timing:
            result = await execute_run(spec, seeds, graph=graph, store=store, models=models, trace=trace)
        return result, timing


class Timing:
    """Wall-clock and CPU seconds (CPU of this process, all its threads: robust to other load)."""

    wall: float = 0.0
    cpu: float = 0.0


@contextmanager
def timed() -> Iterator[Timing]:
    timing = Timing()
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        yield timing
    finally:
        timing.wall, timing.cpu = time.perf_counter() - wall, time.process_time() - cpu


@contextmanager
def scratch_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="dymt-bench-") as tmp:
        yield Path(tmp)


def load_note() -> str:
    """The machine's load while benchmarking: other processes skew wall-clock ratios."""
    try:
        one, five, _ = os.getloadavg()
    except OSError:
        return ""
    return f"{os.cpu_count()} CPUs, load average {one:.1f} (1 min) / {five:.1f} (5 min)"


def run_async(coro):
    return asyncio.run(coro)
