"""First contact with a run's endpoints: ``--check``'s one call per model, and a run stopped by a wrong setting.

An endpoint that has never answered and refuses a call as a wrong setting would (models/circuit.py
``setting_failure``: a refused connection, an unknown host, a TLS error, a 401, 403 or 404) marks its circuit
refused; :func:`stop_on_wrong_setting` then cancels the run at once instead of letting every dialogue fail in turn.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import TypeVar

from langchain_core.messages import HumanMessage

from models.circuit import EndpointSettingError
from models.reasoning import split_reply
from models.registry import RoleModel, parse_spec, provider_endpoint
from models.thinking import thinking_text

T = TypeVar("T")
CHECK_PROMPT = "Reply with the single word OK."
_WATCH_S = 0.2


@dataclass(frozen=True)
class ModelCheck:
    """One model's answer to ``--check``'s call: where it went, how long it took, what came back or why not."""

    roles: tuple[str, ...]
    spec: str
    endpoint: str  # ``provider @ URL``, ``provider`` (its API) or ``in-process``
    seconds: float
    reply: str | None = None
    error: str | None = None
    thinking: str = "the model's own"
    """The role's thinking setting (``--thinking``)."""
    thinks: bool | None = None
    """Whether the answer came with reasoning (None: no answer)."""
    reasoning_carrier: str | None = None
    notes: tuple[str, ...] = ()
    """Settings its requests do not send as asked (models/request_settings.py), and a thinking switch it ignored."""

    @property
    def ok(self) -> bool:
        return self.error is None


async def check_models(models: Sequence[tuple[str, RoleModel]]) -> list[ModelCheck]:
    """One tiny call to every distinct model of ``(role, model)`` pairs, all at once; the first role names it."""
    by_spec: dict[str, tuple[list[str], RoleModel]] = {}
    for role, model in models:
        by_spec.setdefault(model.spec, ([], model))[0].append(role)

    async def one(roles: list[str], model: RoleModel) -> ModelCheck:
        endpoint = provider_endpoint(parse_spec(model.spec), model.sampling) or "in-process"
        started = time.perf_counter()
        try:
            reply = await model.chat.ainvoke([HumanMessage(CHECK_PROMPT)])
        except Exception as exc:  # noqa: BLE001 - reported per model, the others still checked
            text = str(exc) if isinstance(exc, EndpointSettingError) else f"{type(exc).__name__}: {exc}"
            return ModelCheck(
                tuple(roles),
                model.spec,
                endpoint,
                time.perf_counter() - started,
                error=_first_line(text),
                thinking=thinking_text(model.sampling.thinking),
            )
        split = split_reply(reply)
        notes = list(model.sent.notes)
        if split.reasoning and model.sampling.thinking == "off":
            notes.append("it reasons with thinking off: the endpoint ignores the switch sent (see docs/models.md)")
        return ModelCheck(
            tuple(roles),
            model.spec,
            endpoint,
            time.perf_counter() - started,
            reply=_first_line(split.answer),
            thinking=thinking_text(model.sampling.thinking),
            thinks=split.reasoning is not None,
            reasoning_carrier=split.carrier,
            notes=tuple(notes),
        )

    return list(await asyncio.gather(*(one(roles, model) for roles, model in by_spec.values())))


async def stop_on_wrong_setting(run: Awaitable[T], failures: Callable[[], list[str]]) -> T:
    """Await ``run``, cancelling it as soon as ``failures()`` (CallPolicy.setting_failures) names an endpoint that
    never answered and refused a call as a wrong setting would; then raise :class:`EndpointSettingError` with its
    line."""
    task = asyncio.ensure_future(run)
    try:
        while not task.done():
            await asyncio.wait({task}, timeout=_WATCH_S)
            if not task.done() and (lines := failures()):
                task.cancel()
                with suppress(asyncio.CancelledError):
                    await task
                raise EndpointSettingError(lines[0])
    except asyncio.CancelledError:
        task.cancel()  # and waited for: it stops its dialogues and marks the run before this returns
        with suppress(asyncio.CancelledError):
            await task
        raise
    return task.result()


def _first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0][:300]
