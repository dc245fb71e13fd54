"""What the project's own chat models share with LangChain's contract: refusing constructor arguments they do not know.

Pydantic ignores unknown keywords by default, so ``LlamaTranscriptChatModel(stop=["x"])``
used to build a model that never stopped at "x". A ``TypeError`` (as Python raises for an
unexpected keyword) is not wrapped by pydantic, so its one line reaches the user as is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.language_models import BaseChatModel
from pydantic import BaseModel


def accepted_arguments(model_class: type[BaseModel]) -> set[str]:
    """Field names and their aliases: every keyword the class's constructor takes."""
    names = set(model_class.model_fields)
    names |= {field.alias for field in model_class.model_fields.values() if field.alias}
    return names


def refuse_unknown_arguments(
    model_class: type[BaseModel],
    data: Any,
    *,
    extra: frozenset[str] = frozenset(),
    hints: Mapping[str, str] | None = None,
) -> None:
    """Raise ``TypeError`` naming every keyword in ``data`` that ``model_class`` (or ``extra``) does not accept.

    ``hints`` gives the reason (and the fix) for arguments a class refuses on purpose.
    """
    if not isinstance(data, dict):
        return
    accepted = accepted_arguments(model_class) | extra
    unknown = sorted(str(key) for key in data if key not in accepted)
    for name in unknown:
        if hints and name in hints:
            raise TypeError(f"{model_class.__name__} does not take {name}: {hints[name]}")
    if unknown:
        own = sorted((set(model_class.model_fields) - set(BaseChatModel.model_fields)) | extra)
        raise TypeError(
            f"{model_class.__name__} got unexpected argument{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}: "
            f"it accepts {', '.join(own)} (and LangChain's callbacks, tags, metadata, ...)"
        )
