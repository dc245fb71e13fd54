"""The checkpoint serializer never unpickles and never builds a type outside the allow-list."""

from __future__ import annotations

import pickle

import ormsgpack
import pytest

from checkpoints.serde import StrictSerializer, UnsafeCheckpointError

MARKER = []


class Boom:
    def __reduce__(self):
        return (MARKER.append, ("pickle ran",))


def test_state_round_trips():
    serde = StrictSerializer()
    state = {"seed": {"id": "s", "statement": "x"}, "turns": [{"index": 1, "p_biased": 0.25}], "n": None}
    assert serde.loads_typed(serde.dumps_typed(state)) == state


def test_pickle_payload_is_refused_without_running_it():
    serde = StrictSerializer()
    with pytest.raises(UnsafeCheckpointError, match="pickle"):
        serde.loads_typed(("pickle", pickle.dumps(Boom())))
    assert MARKER == []


def test_msgpack_object_naming_an_arbitrary_class_is_refused():
    serde = StrictSerializer()
    # ext code 0 = "construct module.name(arg)": here os.system("...") if it were allowed.
    payload = ormsgpack.packb(ormsgpack.Ext(0, ormsgpack.packb(("os", "system", "echo pwned"))))
    with pytest.raises(UnsafeCheckpointError, match="os.system"):
        serde.loads_typed(("msgpack", payload))


def test_allowed_types_still_load():
    import datetime

    serde = StrictSerializer()
    value = {"when": datetime.datetime(2026, 1, 2, 3, 4, 5)}
    assert serde.loads_typed(serde.dumps_typed(value)) == value
