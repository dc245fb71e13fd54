"""First contact with a run's endpoints: ``--check``'s one call per model, and a run stopped by a wrong setting.

An endpoint that has never answered and refuses a call as a wrong setting would (models/circuit.py
``setting_failure``: a refused connection, an unknown host, a TLS error, a 401, 403 or 404) marks its circuit
refused; :func:`stopping_on_wrong_setting` then cancels the run at once instead of letting every dialogue fail in turn.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

from langchain_core.messages import HumanMessage

from models.circuit import EndpointSettingError
from models.reasoning import split_reply
from models.registry import RoleModel, parse_spec, provider_endpoint
from models.thinking import thinking_text

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


@asynccontextmanager
async def stopping_on_wrong_setting(failures: Callable[[], list[str]]) -> AsyncIterator[None]:
    """While the block runs, cancel it as soon as ``failures()`` (CallPolicy.setting_failures) names an endpoint that
    never answered and refused a call as a wrong setting would; the block then raises :class:`EndpointSettingError`
    with its line (as ``asyncio.timeout`` turns its own cancellation into ``TimeoutError``). A cancellation from
    elsewhere (Ctrl-C, a cancelled ``arun``) goes on as it came."""
    task = asyncio.current_task()
    if task is None:
        raise RuntimeError("stopping_on_wrong_setting runs inside a task")
    lines: list[str] = []

    async def watch() -> None:
        while not (found := failures()):
            await asyncio.sleep(_WATCH_S)
        lines.extend(found)
        task.cancel()  # the block stops its dialogues and marks the run before its CancelledError reaches here

    watcher = asyncio.ensure_future(watch())
    try:
        yield
    except asyncio.CancelledError:
        if lines and task.uncancel() == 0:
            raise EndpointSettingError(lines[0]) from None
        raise
    else:
        if lines:
            task.uncancel()  # the block took the cancellation in and ended: the caller reads the failures itself
    finally:
        watcher.cancel()


def _first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0][:300]
