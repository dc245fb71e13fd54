"""Which judge was validated, and how well: ``evals.judge`` records a score, summaries and reports cite it.

A validation is keyed on the judge spec and the SHA-256 of the judge prompt it used: a run is
covered only by a validation of the same model with the same rubric. Without one, the summary
says the judge is unvalidated (and how to validate it).
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from checkpoints.queries import StoreQueries
from checkpoints.run_record import RunRecord, role_specs
from checkpoints.store import Writer


def record_validation(
    store: Writer,
    *,
    judge_model: str,
    prompt_hash: str,
    file: str,
    file_sha256: str,
    result: Any,
    items: list[dict[str, Any]] | None = None,
) -> None:
    """Store one evals.judge score (``result``: an evals.stats.agreement.Classification) with its ``items`` (one
    per labelled pair: where it sat in its conversation, the judge's and the reference label)."""
    store.record_validation(
        judge_model=judge_model,
        prompt_hash=prompt_hash,
        file=file,
        file_sha256=file_sha256,
        result=result,
        items=items,
    )


def stored_items(row: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The items of a stored evals.judge score (None: recorded without them, so its turns are not known)."""
    raw = row.get("items")
    if not raw:
        return None
    items = json.loads(raw) if isinstance(raw, str) else raw
    return items if isinstance(items, list) else None


def find_validation(store: StoreQueries, judge_model: str | None, prompt_hash: str | None) -> dict[str, Any] | None:
    """The newest validation of this judge spec with this prompt, or None."""
    if not judge_model or not prompt_hash:
        return None
    return store.latest_validation(judge_model, prompt_hash)


def judge_prompt_hash(config: dict[str, Any], prompt_hashes: dict[str, str]) -> str | None:
    """The SHA-256 of the prompt a run's judge used (``config``: its ``runs.config``): its --judge-prompt file, else
    the built-in one for its style."""
    files = RunRecord.from_stored(config).resolved.prompt_files
    if files.get("judge"):
        return files["judge"]
    judge = role_specs(config).get("judge") or ""
    return prompt_hashes.get("judge_bias.transcript" if judge.startswith("local:") else "judge_bias")


def run_validation(store: StoreQueries, run_id: str) -> dict[str, Any]:
    """{"judge_model", "prompt_hash", "validation": row or None, "db"} for a stored run."""
    run = store.get_run(run_id) or {"config": {}, "prompt_hashes": {}}
    judge = role_specs(run["config"]).get("judge")
    digest = judge_prompt_hash(run["config"], run.get("prompt_hashes") or {})
    return {
        "judge_model": judge,
        "prompt_hash": digest,
        "validation": find_validation(store, judge, digest),
        "db": str(getattr(store, "path", "") or "") or None,
    }


def validation_text(entry: dict[str, Any], used: dict[str, Any] | None = None) -> str:
    """One line for a summary or report: the validation the corrected rates use, else the evals.judge score, else
    "unvalidated".

    ``used``: the ``validation`` of the run's ``judge_corrected`` block when it corrected the rates (people's labels of
    the run's own turns are preferred to an evals.judge score; that line then says which one is not used).
    """
    v = entry.get("validation")
    judge, digest = entry.get("judge_model") or "?", (entry.get("prompt_hash") or "?")[:12]
    if used and used.get("kind") != "pairs":  # an evals.judge score in use is the one the lines below cite

        def rate(name: str) -> str:
            r = used[name]
            low, high = r["ci95"]
            return f"{name} {r['value']:.2f} [{low:.2f}, {high:.2f}]"

        line = (
            f"judge {judge} (prompt sha256 {digest}) validated by {used['what']} (n={used['n']}): "
            f"{rate('sensitivity')}, {rate('specificity')}; the corrected rates use this validation"
        )
        if v:
            line += f" (not the evals.judge score on {v['file']})"
        return line
    if not v:
        at = f" --db {shlex.quote(entry['db'])}" if entry.get("db") else ""
        return (
            f"judge {judge} (prompt sha256 {digest}) is unvalidated: score it on labelled pairs with "
            f"python -m evals.judge PAIRS.jsonl --judge-model {judge}{at} (same --judge-prompt) before trusting its "
            "labels"
        )
    acc = "–" if v["accuracy"] is None else f"{100 * v['accuracy']:.0f}%"
    if v["accuracy"] is not None and v["accuracy_low"] is not None and v["accuracy_high"] is not None:
        acc += f" [{100 * v['accuracy_low']:.0f}–{100 * v['accuracy_high']:.0f}]"
    ac1 = "–" if v["ac1"] is None else f"{v['ac1']:.2f}"
    return (
        f"judge {judge} (prompt sha256 {digest}) validated on {v['file']} (n={v['n_items']}, "
        f"{v['n_compared']} parsed): accuracy {acc}, AC1 {ac1} ({v['created_at'][:10]})"
    )
