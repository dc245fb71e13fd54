"""The collector settings dialogues play under (graph/running/gc_settings.py): frozen old objects, a larger young batch,
restored after."""

from __future__ import annotations

import asyncio
import gc
import weakref
from dataclasses import replace

from benchmarks.common import InstantChatModel, instant_models, play_run, synthetic_seeds
from graph.running.gc_settings import YOUNG_THRESHOLD, playing_collector


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_settings_hold_inside_and_are_restored_after() -> None:
    before_threshold, before_frozen = gc.get_threshold(), gc.get_freeze_count()
    with playing_collector():
        assert gc.get_threshold()[0] == YOUNG_THRESHOLD
        assert gc.get_threshold()[1:] == before_threshold[1:]
        assert gc.get_freeze_count() > before_frozen  # what existed is no longer scanned
        with playing_collector():  # nested: an inner exit changes nothing
            pass
        assert gc.get_threshold()[0] == YOUNG_THRESHOLD
        assert gc.get_freeze_count() > before_frozen
    assert gc.get_threshold() == before_threshold
    assert gc.get_freeze_count() == before_frozen


def test_nothing_stays_frozen_after_the_run() -> None:
    freed: list[bool] = []
    cycle = _Cycle()
    weakref.finalize(cycle, freed.append, True)
    del cycle  # unreachable, but only the cycle collector frees it
    with playing_collector():
        gc.collect()
        assert freed == []  # frozen with everything else while dialogues play
    gc.collect()
    assert freed == [True]


def test_a_run_plays_under_the_settings(tmp_path) -> None:
    seen: list[int] = []

    class Watching(InstantChatModel):
        def _generate(self, *args, **kwargs):
            seen.append(gc.get_threshold()[0])
            return super()._generate(*args, **kwargs)

    models = instant_models()
    models = replace(models, target=replace(models.target, chat=Watching(role="target")))
    before = gc.get_threshold()
    result, _ = asyncio.run(play_run(tmp_path / "run.db", models, synthetic_seeds(2), turns=2))
    assert [o.status for o in result.outcomes] == ["finished", "finished"]
    assert seen and set(seen) == {YOUNG_THRESHOLD}
    assert gc.get_threshold() == before
