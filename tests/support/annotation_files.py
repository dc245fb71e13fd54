"""A judged run for the annotation tests, and filling in its exported files as people would (the tests' annotators)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from checkpoints.vocabulary import BIASED, NOT_BIASED
from seeds import CATEGORIES, Seed
from tests.support.judge_prompts import legacy_digest

SEEDS = [Seed(f"s{i:02d}", CATEGORIES[i % len(CATEGORIES)], f"Statement number {i} about a group.") for i in range(24)]


def scripted_judge(messages, n: int) -> str:
    """Deterministic and mixed across turns and dialogues: about a third of the replies labelled biased (drawn from
    what the judge is asked about, not from the frame its prompt puts around it)."""
    digest = legacy_digest(messages)
    return "Rationale: scripted.\nLabel: " + ("biased" if digest[0] % 3 == 0 else "not biased")


def label_export(
    path: Path, store, run_id: str = "r1", *, flip: frozenset[str] | set[str] = frozenset()
) -> dict[str, str]:
    """Fill in a person's label for every exported row: the judge's own label, flipped on ``flip``; returns them by item
    id."""
    rows = list(csv.DictReader(path.open()))
    matrix = store.label_matrix(run_id)
    labels = {}
    for row in rows:
        thread, idx = row["item_id"].rsplit("#", 1)
        judged = matrix[thread][int(idx) - 1]
        truth = judged if row["item_id"] not in flip else (NOT_BIASED if judged == BIASED else BIASED)
        row["label"] = "biased" if truth == BIASED else "not biased"
        labels[row["item_id"]] = truth
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    path.write_text(buffer.getvalue())
    return labels


def play_judged(db: Path, turns: int = 3) -> Path:
    """A 24-dialogue run judged by :func:`scripted_judge`, played once into ``db`` (a module's fixture)."""
    from tests.conftest import default_models, play, scripted

    _, store = play(db, default_models(judge=scripted(scripted_judge, spec="fake:judge")), seeds=SEEDS, turns=turns)
    store.close()
    return db


def copy_run(played: Path, db: Path):
    """A fresh copy of the played run for one test, open for writing."""
    import shutil

    from checkpoints.store import open_writer

    for suffix in ("", "-wal", "-shm"):
        if Path(f"{played}{suffix}").exists():
            shutil.copyfile(f"{played}{suffix}", f"{db}{suffix}")
    return open_writer(db)


def record_pairs(store, *, tp: int, fp: int, fn: int, tn: int) -> None:
    """Record an evals.judge score of run r1's judge (same spec and prompt hash) with these confusion counts."""
    from evals.scorers.judge_validation import run_validation
    from evals.stats.agreement import classification

    entry = run_validation(store, "r1")
    gold = [BIASED] * (tp + fn) + [NOT_BIASED] * (fp + tn)
    predicted = [BIASED] * tp + [NOT_BIASED] * fn + [BIASED] * fp + [NOT_BIASED] * tn
    store.record_validation(
        judge_model=entry["judge_model"],
        prompt_hash=entry["prompt_hash"],
        file="/data/pairs.jsonl",
        file_sha256="0" * 64,
        result=classification(gold, predicted, n_boot=20),
    )


def played_run_fixtures(name: str, *, turns: int):
    """A module's two fixtures: ``played``, its judged run played once, and ``run``, that run copied into each test's
    own ``db`` (``played, run = played_run_fixtures("rates", turns=3)``)."""

    @pytest.fixture(scope="module")
    def played(tmp_path_factory) -> Path:
        return play_judged(tmp_path_factory.mktemp(name) / "played.db", turns=turns)

    @pytest.fixture
    def run(played: Path, db: Path):
        return copy_run(played, db)

    return played, run
