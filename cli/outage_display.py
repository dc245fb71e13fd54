"""The run's progress bars with a line per provider outage: calls waiting, for how long, budget left."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from rich.console import RenderableType
from rich.progress import Progress
from rich.text import Text

from models.circuit import OutageStatus


class OutageProgress(Progress):
    """rich Progress that also shows, while a provider is down, that its calls wait and how long they may."""

    def __init__(self, *columns, outages: Callable[[], list[OutageStatus]] | None = None, **kwargs) -> None:
        self._outages = outages  # set first: rich renders once while constructing
        super().__init__(*columns, **kwargs)

    def get_renderables(self) -> Iterable[RenderableType]:
        yield from super().get_renderables()
        for status in self._outages() if getattr(self, "_outages", None) is not None else ():  # type: ignore[misc]
            yield Text(f"⏸ {status.line()}", style="yellow")
