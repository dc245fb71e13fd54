"""LangChain's message dump (``langchain_core.load.dumpd``) at a fifth of its cost, for the trace encoder.

For a message whose fields are plain JSON (nearly every one) the dump is built from a plan worked out once per
message class; anything else goes through ``dumpd`` itself (tests/unit/checkpoints/test_trace_bytes.py compares the
two).
"""

from __future__ import annotations

from typing import Any


class _NotPlain(Exception):
    """A value ``dumpd`` would do more with than copy: an object, a dict with an ``lc`` key, a key not a string."""


def _plain_copy(value: Any) -> Any:
    kind = type(value)
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value
    if kind is dict:
        if "lc" in value:
            raise _NotPlain
        copy = {}
        for k, v in value.items():
            if type(k) is not str:
                raise _NotPlain
            leaf = type(v)  # leaves copied here: most values are, and a call each costs more than the copy
            copy[k] = v if leaf is str or leaf is int or v is None or leaf is float or leaf is bool else _plain_copy(v)
        return copy
    if kind is list or kind is tuple:
        return [_plain_copy(v) for v in value]
    raise _NotPlain


class _Plan:
    """What ``Serializable.to_json`` does for one message class, worked out once (see :func:`_plan_of`)."""

    __slots__ = ("id", "fields", "attributes")

    def __init__(
        self, lc_id: list[str], fields: dict[str, tuple[bool, bool, Any]], attributes: list[type | None]
    ) -> None:
        self.id = lc_id
        # field name → (required, excluded, what its default makes of a falsy value: _NONE, dict, list or None)
        self.fields = fields
        self.attributes = attributes  # each class whose ``super(c, m).lc_attributes`` is a distinct definition


_PLANS: dict[type, _Plan | None] = {}  # message class → its plan, None: dumpd itself


def _plan_of(kind: type) -> _Plan | None:
    """How ``to_json`` serialises a message class, or None where it does more than copy its useful fields.

    ``to_json`` walks the class's MRO (up to ``Serializable``) asking each level for ``lc_secrets`` and
    ``lc_attributes``, and for deprecated class attributes (which make it raise). All of that depends on the
    class only, except the values of ``lc_attributes``: a class with no secrets keeps, per instance, its useful
    fields in ``__dict__`` order and the ``lc_attributes`` of each distinct definition, in MRO order.
    """
    from langchain_core.load.serializable import Serializable
    from langchain_core.messages import BaseMessage

    if not (isinstance(kind, type) and issubclass(kind, BaseMessage)) or not kind.is_lc_serializable():
        return None
    levels: list[type | None] = [None]
    for cls in kind.__mro__:
        if cls is Serializable:
            break
        if "lc_secrets" in vars(cls) or hasattr(cls, "lc_namespace") or hasattr(cls, "lc_serializable"):
            return None
        levels.append(cls)
    else:
        return None
    # The level asking ``super(level, m).lc_attributes`` gets the first definition after it in the MRO;
    # consecutive levels reaching the same definition update the kwargs with the same values again.
    mro = kind.__mro__
    attributes: list[type | None] = []
    seen: set[type] = set()
    for level in levels:
        after = mro if level is None else mro[mro.index(level) + 1 :]
        owner = next(c for c in after if "lc_attributes" in vars(c))
        if owner is not Serializable and owner not in seen:
            seen.add(owner)
            attributes.append(level)
    try:
        fields = {
            name: (field.is_required(), bool(field.exclude), _empty_default(field))
            for name, field in kind.model_fields.items()
        }
        return _Plan(list(kind.lc_id()), fields, attributes)
    except Exception:  # noqa: BLE001 - an unusual class: dumpd knows best
        return None


_NONE = object()


def _empty_default(field: Any) -> Any:
    """The falsy value ``_is_field_useful`` drops for ``field`` without comparing: None (_NONE), {} (dict), []
    (list)."""
    if field.default_factory is dict or field.default_factory is list:
        return field.default_factory
    if field.default_factory is None and field.default is None:
        return _NONE
    return None


def message_dict(message: Any) -> Any:
    """``langchain_core.load.dumpd(message)``, at a fifth of its cost for a message whose fields are plain JSON.

    ``dumpd`` is ``to_json()`` with each constructor argument copied, dicts with an ``lc`` key escaped and
    objects inside serialised; for a message with none of those (nearly every one) this builds the same
    dict from the class's plan (:func:`_plan_of`) and the instance's fields. Anything else goes through
    ``dumpd`` itself (tests/unit/checkpoints/test_trace_bytes.py compares the two).
    """
    kind = type(message)
    try:
        plan = _PLANS[kind]
    except KeyError:  # a class not seen before: its plan, worked out once
        plan = _PLANS[kind] = _plan_of(kind)
    if plan is not None and not message.__pydantic_extra__:
        try:
            return {"lc": 1, "type": "constructor", "id": list(plan.id), "kwargs": _kwargs(message, plan)}
        except _NotPlain:
            pass
    from langchain_core.load import dumpd

    return dumpd(message)


def _kwargs(message: Any, plan: _Plan) -> dict[str, Any]:
    """``to_json()``'s constructor arguments of ``message``, copied as plain JSON (else _NotPlain)."""
    from langchain_core.load.serializable import _is_field_useful

    fields = plan.fields
    kwargs: dict[str, Any] = {}
    for name, value in message.__dict__.items():
        field = fields.get(name)
        if field is None or name[0] == "_":  # not a field: never a constructor argument
            continue
        required, excluded, empty = field
        if not required:
            try:
                truthy = bool(value)
            except Exception:  # noqa: BLE001 - as _is_field_useful treats it
                truthy = False
            if not truthy:
                # _is_field_useful's common answers without its lookups, else its own answer
                if value is None and empty is _NONE or type(value) is empty:
                    continue
                if not _is_field_useful(message, name, value):
                    continue
        if excluded:
            continue
        kwargs[name] = value
    for level in plan.attributes:
        owner: Any = message if level is None else super(level, message)  # a super() proxy reads like the message
        kwargs.update(owner.lc_attributes)
    return {k: _plain_copy(v) for k, v in kwargs.items()}
