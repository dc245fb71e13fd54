"""A checkpoint serializer that never unpickles and revives only an allow-list of types.

LangGraph's default serializer can rebuild any importable class named in a
stored msgpack payload. A dialogue database may come from another machine, so
ours refuses pickle outright and stops with :class:`UnsafeCheckpointError` on
any type outside LangGraph's safe list, instead of warning and carrying on.
"""

from __future__ import annotations

from typing import Any

import ormsgpack
from langgraph.checkpoint.serde import _msgpack as lg_msgpack
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer, _create_msgpack_ext_hook

# ext codes whose payload starts with (module, name, ...): constructors and method calls.
_CONSTRUCTOR_CODES = {0, 1, 2, 3, 4, 5}


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
        if code in _CONSTRUCTOR_CODES:
            try:
                head = ormsgpack.unpackb(data, ext_hook=lambda _c, _d: None, option=ormsgpack.OPT_NON_STR_KEYS)
                key = (str(head[0]), str(head[1]))
            except Exception as exc:  # noqa: BLE001
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

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        type_, _ = data
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
