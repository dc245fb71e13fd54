"""Playing a run: ``dymt.run(config)`` and ``await dymt.arun(config)`` return a :class:`dymt.RunResult`.

The command ``python -m graph.run`` is this function with flags in and the result rendered. What the run says while
it plays (progress, provider outages, pauses) goes to ``on_event`` as events (dymt/events.py); nothing is printed.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import inspect
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import suppress
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from dymt.errors import DymtError
from dymt.events import Event, RunEnded
from dymt.preparing import config_of
from dymt.results import RunResult
from dymt.session import Invocation
from graph.config.experiment import model_given_as
from graph.config.run_config import ModelBuildError, RunConfig
from graph.running.endpoints import ModelCheck, check_models

P = ParamSpec("P")
T = TypeVar("T")


def _options_of(source: Callable[P, Any]) -> Callable[[Callable[..., T]], Callable[P, T]]:
    """The decorated function takes ``source``'s parameters: its signature (``help()``) and its type (mypy)."""

    def decorate(function: Callable[..., T]) -> Callable[P, T]:
        returns = inspect.signature(function).return_annotation
        function.__signature__ = inspect.signature(source).replace(return_annotation=returns)  # type: ignore[attr-defined]
        return function

    return decorate


@_options_of(Invocation)
def run(config: RunConfig | str | Path | None = None, /, **options: Any) -> RunResult:
    """Play a run (or resume the one ``run_id`` names) and return its result; see :func:`arun`.

    In a thread with an event loop running (a notebook cell), the run plays on a thread of its own.
    """
    return run_coroutine(Invocation(config, **options).play())


@_options_of(Invocation)
async def arun(config: RunConfig | str | Path | None = None, /, **options: Any) -> RunResult:
    """Play a run on the running event loop and return its :class:`RunResult`.

    ``config`` is a :class:`RunConfig` (or an experiment file's path), or keyword options named as the command's flags
    (``mode=["implicit"]``, ``target_model=["openai:gpt-4o-mini"]``, ``turns=10``, ``db="runs.db"``, ``run_id="r1"``);
    how this invocation plays (``on_event=``, ``processes=``, ``trace=``, ``pause_after=``, ``review=``,
    ``store_outage_budget=``, ``command=``) as :class:`Invocation` takes them. A ``run_id`` the store holds resumes
    that run: options not given come from it, and one given that contradicts it raises. Bad input raises
    :class:`DymtError` and writes nothing; an outage of the store or disk past its budget raises :class:`RunStopped`
    (nothing lost). Two runs may play at once in one process, each with its own events.
    """
    return await Invocation(config, **options).play()


async def astream(config: RunConfig | None = None, /, **options: Any) -> AsyncIterator[Event]:
    """:func:`arun` as an async iterator of its events, ending with :class:`RunEnded` (the result); stopping the loop
    early cancels the run (what it stored stays: resume it by its id). Errors are raised as :func:`arun` raises them."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()
    done = object()

    def sink(event: Event) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, event)

    task = asyncio.ensure_future(arun(config, on_event=sink, **options))
    task.add_done_callback(lambda _: loop.call_soon_threadsafe(queue.put_nowait, done))
    try:
        while (item := await queue.get()) is not done:
            yield item
        result = task.result()
        yield RunEnded(result.run_id, result)
    finally:
        if not task.done():
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task


def run_coroutine(coroutine: Any) -> Any:
    """Await ``coroutine`` from synchronous code: here, or on a thread of its own if this thread runs a loop already."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    box: dict[str, Any] = {}
    context = contextvars.copy_context()  # the caller's context variables (the run a cached reply belongs to)

    def target() -> None:
        try:
            box["value"] = context.run(asyncio.run, coroutine)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="dymt-run")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def check(config: RunConfig | None = None, /, **options: Any) -> list[ModelCheck]:
    """One tiny call to each distinct model of the run (no cache, one retry): how each answered. Writes nothing."""
    config, _ = config_of(config, options, None)
    try:
        templates = config.load_prompts()
    except Exception as exc:  # noqa: BLE001 - ConfigError: one line
        raise DymtError(str(exc)) from None
    policy = config.call_policy(None)
    policy.retry = dataclasses.replace(policy.retry, attempts=2)
    try:
        built = config.build_models(policy, templates=templates)
    except ModelBuildError as exc:
        raise DymtError(f"{model_given_as(config.config_file, exc.role, exc.spec)}: {exc.reason}") from None
    roles = [("user", built.models.user), ("judge", built.models.judge), *(("target", t) for t in built.targets)]
    return run_coroutine(check_models(roles))
