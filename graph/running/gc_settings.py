"""The garbage collector while dialogues play: objects from before the run are not scanned again, young ones in larger
batches.

With Python's defaults a run at concurrency 32 spent about 1.4 ms of CPU per turn in the collector, most
of it in full collections walking every object of the loaded libraries (LangChain, pydantic, the provider
clients) again and again; under :func:`playing_collector` it spends about 0.07 ms
(docs/benchmarks-harness.md). Garbage from before the run that only the collector can free waits for the end
of the run (no full collection at its start: 0.1–0.2 s each in a test process); reference counting still frees
most objects at once, whatever the thresholds.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG_THRESHOLD = 20_000  # net allocations between young collections (Python's default: 700)

_lock = threading.Lock()
_depth = 0
_previous: tuple[int, ...] | None = None


@contextmanager
def playing_collector() -> Iterator[None]:
    """Freeze what exists now and raise the young threshold until the outermost ``with`` ends (re-entrant)."""
    global _depth, _previous
    with _lock:
        if _depth == 0:
            _previous = gc.get_threshold()
            gc.freeze()
            gc.set_threshold(YOUNG_THRESHOLD, *_previous[1:])
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _previous is not None:
                gc.set_threshold(*_previous)
                gc.unfreeze()
                _previous = None
