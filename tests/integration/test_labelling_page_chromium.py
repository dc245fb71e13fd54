"""The results page's labelling queue in real headless Chromium: the next batch served in order, blind, batch by batch.

A judged run (24 dialogues × 3 turns, scripted judge) has one active batch labelled through the
command line; ``python -m evals.report --html`` then serves the next batch. A labeller labels every
reply on the page (never shown the judge's label), downloads the batch, ``python -m evals.annotate
validate`` stores it and says what it narrowed; the page built again serves a new batch of replies
not labelled yet, and says what the latest batch did to each corrected interval.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from checkpoints.readers import open_reader
from cli import annotate, report
from evals.judge_error.active_design import parse_pick
from evals.judge_error.double_sampling import human_labels
from tests.support.annotation_files import label_export, play_judged
from tests.support.chromium import CHROMIUM, Browser

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        CHROMIUM is None and os.environ.get("CI") != "true",
        reason="NOT TESTED: Debian's chromium is not installed (apt-get install -y chromium; the CI script "
        "installs it)",
    ),
]

ROOT = Path(__file__).resolve().parents[2]


def _build(db: Path, out: Path) -> Path:
    assert report.main(["--run-id", "r1", "--out", str(out), "--html", "--db", str(db), "--n-boot", "30"]) == 0
    return out / "report.html"


def _meta(page: Path) -> dict:
    data = page.read_bytes()  # the data block is ASCII (the dialogues' bytes come after it)
    start = data.index(b'id="dymt-meta">') + len(b'id="dymt-meta">')
    return json.loads(data[start : data.index(b"</script>", start)].decode("ascii"))


def test_a_batch_labelled_on_the_page_is_validated_and_the_page_serves_the_next(tmp_path, capsys):
    db = play_judged(tmp_path / "run.db", turns=3)
    first = tmp_path / "batch1.csv"
    assert (
        annotate.main(
            [
                "export",
                "--run-id",
                "r1",
                "--design",
                "active",
                "--budget",
                "60",
                "--batch",
                "8",
                "--out",
                str(first),
                "--db",
                str(db),
            ]
        )
        == 0
    )
    reader = open_reader(db)
    rows = list(csv.DictReader(first.open()))
    label_export(first, reader, flip={rows[0]["item_id"]})
    assert annotate.main(["validate", str(first), "--run-id", "r1", "--db", str(db)]) == 0
    capsys.readouterr()
    matrix = reader.label_matrix("r1")
    reader.close()

    page = _build(db, tmp_path / "report")
    queue = _meta(page)["queue"]
    assert len(queue) == 8 and not {q["item"] for q in queue} & {r["item_id"] for r in rows}
    assert all(parse_pick(q["draw"])[0] == 1 for q in queue)  # the next seed, as export would draw it
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    with Browser(tmp_path / "profile") as b:
        b.allow_downloads(downloads)
        b.open(page.as_uri())
        b.wait_for("document.getElementById('shown').textContent")
        section = " ".join(b.js("document.getElementById('labelling').textContent").split())
        assert "run r1: 8 human labels in 1 batch" in section
        assert "the next batch (8 replies, active draw, seed 1) is expected to bring" in section
        assert b.js("document.getElementById('queue').hidden") is True
        b.js("document.getElementById('queue-start').click()")
        b.wait_for("!!document.querySelector('#queue .pick')")
        said = {}
        for k, entry in enumerate(queue):
            shown = b.js(
                f"window.dymtReview.showPick({k}).then(() => document.querySelector('#queue .pick').dataset.item)"
            )
            assert shown == entry["item"]  # served in order
            box = b.js("document.getElementById('queue').textContent")
            assert f"Reply {k + 1} of 8" in box and "P(biased)" not in box and "rationale" not in box
            assert b.js("document.querySelectorAll('#queue .judge, #queue .badge').length") == 0  # blind to the judge
            thread, turn = entry["item"].rsplit("#", 1)
            label = (
                matrix[thread][int(turn) - 1]
                if k
                else ("not_biased" if matrix[thread][int(turn) - 1] == "biased" else "biased")
            )
            said[entry["item"]] = label
            b.js(f"document.querySelector('#queue .label-{label}').click()")
            b.wait_for(f"document.getElementById('queue-count').textContent === '{k + 1} of 8 labelled'")
        # the labels survive a reload of the page
        b.open(page.as_uri())
        b.wait_for("document.getElementById('shown').textContent")
        assert b.js("document.getElementById('queue-count').textContent") == "8 of 8 labelled"
        b.js("document.getElementById('labeller').value = 'ana'")
        b.js("document.getElementById('queue-download').click()")
        path = downloads / "labels-ana.csv"
        deadline = time.monotonic() + 20
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
    assert path.exists(), list(downloads.iterdir())
    got = list(csv.DictReader(path.open(encoding="utf-8-sig")))
    assert [r["item_id"] for r in got] == [q["item"] for q in queue] and {r["draw"] for r in got} == {
        q["draw"] for q in queue
    }
    assert "judge" not in path.read_text(encoding="utf-8-sig").splitlines()[0]

    done = subprocess.run(
        [sys.executable, "-m", "evals.annotate", "validate", str(path), "--run-id", "r1", "--db", str(db)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    out = " ".join(done.stdout.split())
    assert "stored 8 human labels of run r1" in out and "run r1: 16 human labels in 2 batches" in out
    assert "fake:target · implicit, cumulative:" in out and "wide before" in out
    reader = open_reader(db)
    stored = human_labels(reader, "r1")
    reader.close()
    assert {f"{t}#{i}": v for (t, i), v in stored.items() if f"{t}#{i}" in said} == said

    again = _build(db, tmp_path / "report2")
    later = _meta(again)["queue"]
    assert len(later) == 8 and not {q["item"] for q in later} & (set(said) | {r["item_id"] for r in rows})
    assert all(parse_pick(q["draw"])[0] == 2 for q in later)
