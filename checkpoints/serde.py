"""A checkpoint serializer that never unpickles and revives only an allow-list of types.

LangGraph's default serializer can rebuild any importable class named in a
stored msgpack payload. A dialogue database may come from another machine, so
ours refuses pickle outright and stops with :class:`UnsafeCheckpointError` on
any type outside LangGraph's safe list, instead of warning and carrying on.

Payloads are also compressed: raw deflate with a preset dictionary of what checkpoints and
writes repeat (channel, node and turn-record key names), stored under the type tag
``msgpack+z1`` when that is smaller. Rows stored as plain ``msgpack`` (every row written before,
and small values) load as they always did; a compressed payload goes through the same strict
checks once inflated, and one that would inflate past a bound is refused.
"""

from __future__ import annotations

import zlib
from typing import Any

import ormsgpack
from langgraph.checkpoint.serde import _msgpack as lg_msgpack
from langgraph.checkpoint.serde.jsonplus import EXT_DELTA_SNAPSHOT, JsonPlusSerializer, _create_msgpack_ext_hook
from langgraph.checkpoint.serde.types import _DeltaSnapshot

# ext codes whose payload starts with (module, name, ...): constructors and method calls.
_CONSTRUCTOR_CODES = {0, 1, 2, 3, 4, 5}


# The preset dictionary of ``msgpack+z1``: never change these bytes (stored payloads need them to
# inflate); a new dictionary gets a new tag. Made from a checkpoint, three turn records and two messages
# as msgpack, the most frequent strings last (deflate reaches them with the shortest distances).
ZDICT_1 = (
    b"\x8c\xa5index\n\xacuser_message\xa0\xaeutterance_type\xa9reasoning\xaauser_model\xa0\xac"
    b"latency_user\xcb?\xe0\x00\x00\x00\x00\x00\x00\xa6tokens\x82\xa7user_in2\xa8user_out\x0c\xa7leakage\xcb\x00\x00\x00"
    b"\x00\x00\x00\x00\x00\xb3leakage_containment\xcb\x00\x00\x00\x00\x00\x00\x00\x00\xadleakage_ngram\xcb\x00\x00\x00\x00\x00\x00\x00\x00\xa6le"
    b"aked\xc2\xaduser_attempts\x01\xaduser_rejected\x90\x86\xa5index\n\xa5reply\xa0\xactarget_mo"
    b"del\xa0\xaelatency_target\xcb?\xe0\x00\x00\x00\x00\x00\x00\xa6tokens\x82\xa9target_in2\xaatarget_out\x0c\xaf"
    b"target_attempts\x01\x88\xa5index\n\xa5label\xaanot_biased\xa9rationale\xa0\xa8p_biase"
    b"d\xc0\xa9judge_raw\xadLabel: biased\xabjudge_model\xa0\xadlatency_judge\xcb?\xe0\x00\x00\x00\x00"
    b"\x00\x00\xa6tokens\x82\xa8judge_in2\xa9judge_out\x0c\x92\x82\xa4role\xa4user\xa7content\xa0\x82\xa4role\xa9a"
    b"ssistant\xa7content\xa0\x87\xa1v\x04\xa2ts\xd9 2026-01-01T00:00:00.000000+00:00\xa2i"
    b"d\xd9$1f000000-0000-6000-8000-000000000000\xaechannel_values\x89\xa4seed"
    b"\x83\xa2id\xa0\xa8category\xa0\xa9statement\xa0\xa4mode\xa8implicit\xa9max_turns\n\xabstop_rea"
    b"son\xa9max_turns\xa5error\xc0\xabfailed_node\xc0\xa6script\xc0\xb1next_user_message\xc0"
    b"\xb8branch:to:user_simulator\xc0\xb0channel_versions\xde\x00\x10\xa9__start__\xa3b10"
    b"\xa4seed\xa3b10\xa4mode\xa3b10\xa9max_turns\xa3b10\xa8messages\xa3b10\xa5turns\xa3b10\xabstop"
    b"_reason\xa3b10\xa5error\xa3b10\xabfailed_node\xa3b10\xa6script\xa3b10\xb1next_user_m"
    b"essage\xa3b10\xb8branch:to:user_simulator\xa3b10\xb7branch:to:scripted_u"
    b"ser\xa3b10\xb0branch:to:target\xa3b10\xafbranch:to:judge\xa3b10\xb5branch:to:t"
    b"ermination\xa3b10\xadversions_seen\x87\xa9__input__\x81\xb3branch:to:__input__"
    b"\xa3b10\xa9__start__\x81\xb3branch:to:__start__\xa3b10\xaeuser_simulator\x81\xb8bran"
    b"ch:to:user_simulator\xa3b10\xadscripted_user\x81\xb7branch:to:scripted_u"
    b"ser\xa3b10\xa6target\x81\xb0branch:to:target\xa3b10\xa5judge\x81\xafbranch:to:judge\xa3"
    b"b10\xabtermination\x81\xb5branch:to:termination\xa3b10\xb0updated_channels\x93"
    b"\xa8messages\xa5turns\xafbranch:to:judge"
)
COMPRESSED_TAG = "msgpack+z1"
_WBITS = -15  # raw deflate: no header or checksum (the tag says how to read it)
_MIN_COMPRESS = 48  # bytes: smaller payloads are stored as they are
_MAX_INFLATED = 256 * 1024 * 1024  # a tampered payload must not inflate without bound


def compress(data: bytes) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, _WBITS, 8, zlib.Z_DEFAULT_STRATEGY, ZDICT_1)
    return c.compress(data) + c.flush()


def inflate(data: bytes) -> bytes:
    d = zlib.decompressobj(_WBITS, zdict=ZDICT_1)
    try:
        out = d.decompress(data, _MAX_INFLATED)
    except zlib.error as exc:
        raise UnsafeCheckpointError(
            f"checkpoint payload does not inflate ({exc}): the database may be damaged"
        ) from None
    if d.unconsumed_tail:
        raise UnsafeCheckpointError("checkpoint payload inflates past 256 MB: refusing to load it")
    return out


class UnsafeCheckpointError(RuntimeError):
    """A stored checkpoint asks to be unpickled or to build a type outside the allow-list."""


def _strict_ext_hook(refusals: list[UnsafeCheckpointError]) -> Any:
    delegate = _create_msgpack_ext_hook(None)

    def hook(code: int, data: bytes) -> Any:
        try:
            return _check(code, data)
        except UnsafeCheckpointError as exc:
            refusals.append(exc)  # ormsgpack replaces hook exceptions by a bare ValueError
            raise

    def _check(code: int, data: bytes) -> Any:
        if code == EXT_DELTA_SNAPSHOT:
            # A delta channel's stored value: unpacked with this hook, so what it holds is checked too.
            return _DeltaSnapshot(ormsgpack.unpackb(data, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS))
        if code in _CONSTRUCTOR_CODES:
            try:
                head = ormsgpack.unpackb(data, ext_hook=lambda _c, _d: None, option=ormsgpack.OPT_NON_STR_KEYS)
                key = (str(head[0]), str(head[1]))
            except Exception as exc:
                raise UnsafeCheckpointError(f"malformed object in checkpoint (ext code {code})") from exc
            if key not in lg_msgpack.SAFE_MSGPACK_TYPES:
                raise UnsafeCheckpointError(
                    f"checkpoint names type {key[0]}.{key[1]}, which is not allowed: the database may be "
                    "tampered with; refusing to load it"
                )
        return delegate(code, data)

    return hook


class StrictSerializer(JsonPlusSerializer):
    """JsonPlusSerializer in strict mode that raises instead of skipping unsafe payloads."""

    def __init__(self) -> None:
        self._refusals: list[UnsafeCheckpointError] = []
        super().__init__(
            pickle_fallback=False, allowed_msgpack_modules=None, __unpack_ext_hook__=_strict_ext_hook(self._refusals)
        )

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        type_, data = super().dumps_typed(obj)
        if type_ == "msgpack" and len(data) >= _MIN_COMPRESS:
            packed = compress(data)
            if len(packed) < len(data):
                return COMPRESSED_TAG, packed
        return type_, data

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        type_, payload = data
        if type_ == COMPRESSED_TAG:
            data = ("msgpack", inflate(payload))
        if type_ == "pickle":
            raise UnsafeCheckpointError(
                "checkpoint holds a pickle payload, which DyMT-ESB never loads: the database may be tampered with"
            )
        self._refusals.clear()
        try:
            return super().loads_typed(data)
        except ValueError:
            if self._refusals:
                raise self._refusals[-1] from None
            raise
