"""How a branch's stored change record reads in a list or tree.

The branch tree and counterfactual sets are queries (:mod:`checkpoints.queries`), written
through the one writer (:class:`checkpoints.store.Writer`).
"""

from __future__ import annotations

import json
from typing import Any


def describe_change(change: Any, *, reveal_seed: bool = True) -> str:
    """A branch's stored change record in a few words; a changed seed statement stays hidden unless revealed."""
    if isinstance(change, str):
        try:
            change = json.loads(change)
        except ValueError:
            return _brief(change)
    if change in (None, "", {}):
        return ""
    if not isinstance(change, dict):
        return _brief(change)
    kind = change.get("kind")
    if kind == "user_message":
        return f"user message “{_brief(change.get('user_message'))}”"
    if kind == "swap":
        return f"swap {change.get('swaps', '')}"
    if kind in ("target_model", "judge_model"):
        return f"{kind.replace('_', ' ')} → {change.get('model')}"
    if kind == "mode":
        return f"mode {change.get('replaces_mode')} → {change.get('mode')}"
    if kind == "seed_statement":
        return (
            f"seed statement “{_brief(change.get('seed_statement'))}”"
            if reveal_seed
            else "seed statement changed (hidden)"
        )
    if kind == "rerun":
        return "rerun" + (
            f" (sampling seed {change['sampling_seed']})" if change.get("sampling_seed") is not None else ""
        )
    if kind:
        return str(kind)
    shown = {k: v for k, v in change.items() if reveal_seed or "statement" not in k}
    return ", ".join(f"{k}={_brief(v)!r}" if isinstance(v, str) else f"{k}={_brief(v)}" for k, v in shown.items())


def _brief(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
