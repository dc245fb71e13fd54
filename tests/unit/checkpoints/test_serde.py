"""The checkpoint serializer never unpickles and never builds a type outside the allow-list (a tampered store: both
backends)."""

from __future__ import annotations

import pickle

import ormsgpack
import pytest

from checkpoints.serde import StrictSerializer, UnsafeCheckpointError
from tests.support import forked
from tests.support.backends import Db, execute, is_postgres, rows

MARKER: list[str] = []


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


class TouchFile:
    """A pickle payload that would create a file if it were ever unpickled."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))


def _tamper(db: Db, type_: str, payload: bytes) -> None:
    """Put ``payload`` (serializer type ``type_``) where the next resume of the run loads its state from."""
    if is_postgres(db):
        # The PostgreSQL saver keeps the checkpoint itself as JSONB and the channel values as typed blobs beside it.
        changed = execute(db, "update checkpoint_blobs set type = ?, blob = ? where type <> 'empty'", [type_, payload])
    else:
        [newest] = rows(db, "select thread_id, checkpoint_id from checkpoints order by checkpoint_id desc limit 1")
        changed = execute(
            db,
            "update checkpoints set type = ?, checkpoint = ? where thread_id = ? and checkpoint_id = ?",
            [type_, payload, *newest],
        )
    assert changed > 0


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["pickle", "msgpack"])
def test_a_tampered_store_stops_the_tool_without_running_the_payload(backend_db: Db, tmp_path, kind):
    db, marker = backend_db, tmp_path / "pwned"
    fakes = ["--user-model", "fake:u", "--target-model", "fake:t", "--judge-model", "fake:j"]
    common = [
        "run",
        *fakes,
        "--db",
        str(db),
        "--run-id",
        "t",
        "--limit",
        "1",
        "--turns",
        "2",
        "--pause-after",
        "1",
    ]
    first = forked.run("tests.support.fake_cli", *common, timeout=120)
    assert first.returncode == 0, first.stderr
    assert rows(db, "select status from dialogues") == [("paused",)]
    if kind == "pickle":
        payload = pickle.dumps(TouchFile(marker))
    else:
        payload = ormsgpack.packb(ormsgpack.Ext(0, ormsgpack.packb(("os", "system", f"touch {marker}"))))
    _tamper(db, kind, payload)
    resumed = forked.run("tests.support.fake_cli", *common[:-2], timeout=120)
    assert resumed.returncode == 2, resumed.stderr
    errors = [line for line in resumed.stderr.splitlines() if line.startswith("error:")]
    # One error line (after the progress display had started) naming what was refused.
    assert len(errors) == 1 and ("pickle" if kind == "pickle" else "os.system") in errors[0], resumed.stderr
    assert resumed.stderr.strip().splitlines()[-1] == errors[0]
    assert not marker.exists()
