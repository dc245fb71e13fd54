"""What a run's summary says about thinking models: the reasoning its targets wrote (and, with ``--judge-reasoning``,
its bias beside the replies'), and how each role's requests were sent.

Both are plain data (the summary's ``reasoning`` and ``requests``); every setting a role's integration dropped or
changed, and a cap the provider did not hold to, is one line of the summary's ``notes``, said once.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from checkpoints.queries import StoreQueries
from checkpoints.run_record import RunRecord
from checkpoints.vocabulary import REASONING_LABELS
from evals.stats.metrics import summarise


def reasoning_summary(
    store: StoreQueries, run_id: str, *, turns: int, answers: Any, clusters: Sequence[object] | None
) -> dict[str, Any]:
    """The targets' reasoning: replies that came with it (by carrier) and, where the judge labelled it, its bias rate
    per turn beside the answers' (``answers``: the run's summarised answer labels)."""
    carriers = store.reasoning_counts(run_id)
    block: dict[str, Any] = {"turns_with_reasoning": sum(carriers.values()), "carriers": carriers, "per_turn": []}
    matrix = store.label_matrix(run_id, label_set=REASONING_LABELS)
    if not any(label is not None for labels in matrix.values() for label in labels):
        return block
    clusters = list(clusters) if clusters is not None else None
    metrics = summarise(
        list(matrix.values()), turns, n_boot=1000, seed=0, delta_start=min(5, turns), delta_end=turns, clusters=clusters
    )
    block["per_turn"] = [
        {
            "turn": t.turn,
            "labelled": t.n_labelled,
            "biased": t.n_biased,
            "rate": e.value,
            "ci95": [e.low, e.high],
            "answer_rate": answer.value,
        }
        for t, e, answer in zip(metrics.per_turn, metrics.per_turn_rate, answers.per_turn_rate)
    ]
    block["unparsed_labels"] = metrics.n_unparsed
    return block


def request_summary(store: StoreQueries, run_id: str, config: Any) -> tuple[dict[str, Any], list[str]]:
    """Each role's requests as the run recorded them (thinking, reply and request caps, what was sent), and the notes:
    settings dropped or changed, and replies longer than the request's cap (a provider that ignores it)."""
    requests = RunRecord.from_stored(config).resolved.requests
    notes = [
        f"{name} {_spec(config, name)}: {note}" for name, entry in requests.items() for note in entry.get("notes") or []
    ]
    over = _over_cap(store, run_id, requests)
    for name, (count, cap) in sorted(over.items()):
        said = f"max tokens ignored: {count} answer(s) longer than the request's cap of {cap}"
        notes.append(f"{name} {_spec(config, name)}: {said}")
    return requests, notes


def _spec(config: Any, name: str) -> str:
    if name.startswith("target:"):
        return name.removeprefix("target:")
    return str(RunRecord.from_stored(config).resolved.models.get(name) or "")


def _over_cap(store: StoreQueries, run_id: str, requests: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """Target name → (replies whose output tokens exceed the request's cap, the cap), where any did.

    Only the target's: a served chat target answers each turn in one call (the user simulator's redraws and the
    judge's second call on the reasoning add up their tokens), and the embedded model holds to its cap itself.
    """
    over: dict[str, tuple[int, int]] = {}
    for row in store.token_rows(run_id=run_id):
        tokens = json.loads(row.get("tokens") or "{}")
        target = str(row.get("target_model") or row.get("dialogue_target") or "")
        name = f"target:{target}" if f"target:{target}" in requests else "target"
        cap = (requests.get(name) or {}).get("request_cap")
        out = tokens.get("target_output_tokens")
        if cap and out is not None and int(out) > int(cap) and not target.startswith("local:"):
            count, _ = over.get(name, (0, int(cap)))
            over[name] = (count + 1, int(cap))
    return over
