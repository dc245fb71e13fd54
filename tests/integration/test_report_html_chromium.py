"""``python -m evals.report --html``: the results page in real headless Chromium (Debian's ``chromium``).

Chromium opens the file offline and is driven over the DevTools protocol (tests/support/chromium.py):
the page's own script runs under its own Content-Security-Policy, dialogues are decoded when
opened, screenshots must not be blank, every table on the page must equal report.md's cell for
cell, model text containing markup must arrive as text, and a reviewer's marks must travel from
the page to ``python -m evals.annotate agree`` and come back as agreement figures.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from checkpoints.readers import open_reader
from cli import report
from evals.dataset import load_dataset
from evals.judge_error.run_blocks import PAIRS, ChosenValidation
from evals.judge_error.validation import JudgeValidation
from evals.report.data import compute_report
from evals.report.html import collect, render_page
from evals.stats.transitions import raw_transitions
from tests.support.chromium import CHROMIUM, Browser
from tests.support.replay_fixtures import AGE, BRANCH, DEEP, FAITH, MAIN, RERUN, build_replay_db

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        # In CI (CI=true) the browser is required: a missing one fails the suite instead of skipping.
        CHROMIUM is None and os.environ.get("CI") != "true",
        reason="NOT TESTED: Debian's chromium is not installed (apt-get install -y chromium; the CI script "
        "installs it)",
    ),
]

ROOT = Path(__file__).resolve().parents[2]
IMG_REPLY = 'Fine.<img src="x" onerror="document.title=\'pwned\'"> AGE-IMG'
FAILED = "r2:s-disab:assessment"
TABLES_JS = """Array.from(document.querySelectorAll('table.report')).map(t => ({
  title: t.caption.textContent,
  headers: Array.from(t.tHead.rows[0].cells).map(c => c.textContent),
  rows: Array.from(t.tBodies[0].rows).map(r => Array.from(r.cells).map(c => c.textContent))}))"""


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("html")
    db = build_replay_db(tmp / "d.db")
    with sqlite3.connect(db) as conn:
        conn.execute("update turns set reply = ? where thread_id = ? and idx = 2", [IMG_REPLY, AGE])
        conn.execute("alter table turns add column leakage_flagged integer")
        conn.execute("update turns set leakage_flagged = 0 where thread_id = ?", [AGE])
        conn.execute("update turns set leakage_flagged = 1 where thread_id = ? and idx = 2", [MAIN])
    out = tmp / "report"
    assert (
        report.main(
            ["--run-id", "r1", "--run-id", "r2", "--out", str(out), "--html", "--db", str(db), "--n-boot", "50"]
        )
        == 0
    )
    return out, db


@pytest.fixture(scope="module")
def page(built) -> Path:
    return built[0] / "report.html"


@pytest.fixture()
def browser(tmp_path):
    with Browser(tmp_path / "profile") as b:
        yield b


def _open(b: Browser, url: str) -> None:
    b.open(url)
    b.wait_for("document.getElementById('shown').textContent")


def _open_dialogue(b: Browser, thread: str, *, pair: bool = False) -> None:
    b.js(f"new Promise(r => window.dymtReview.open({json.dumps(thread)}, {json.dumps(pair)}, () => r(1)))")


def _markdown_tables(text: str) -> list[dict[str, Any]]:
    """Every pipe table of report.md: headers and rows, cells unescaped as a reader sees them."""

    def cells(line: str) -> list[str]:
        return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip()[1:-1])]

    tables, lines = [], text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("| ") and i + 1 < len(lines) and re.fullmatch(r"\|( ---:? \|)+", lines[i + 1]):
            rows = []
            for row in lines[i + 2 :]:
                if not row.startswith("| "):
                    break
                rows.append(cells(row))
            tables.append({"headers": cells(line), "rows": rows})
    return tables


def _norm(cell: str) -> str:
    return " ".join(cell.split())


def test_page_is_self_contained_and_owner_only(page):
    text = page.read_bytes().decode("latin-1")
    assert stat.S_IMODE(page.stat().st_mode) == 0o600
    # Nothing to fetch: no src/href but fragments, and a policy that forbids any load.
    assert not re.findall(r'\b(?:src|href)\s*=\s*"(?!#)', text)
    assert "default-src 'none'" in text.replace("&#x27;", "'") and "http://" not in text and "https://" not in text
    # Model text is not in the markup at all: it travels compressed and is set as text when a dialogue opens.
    assert "MAIN-T1" not in text and "alert(1)" not in text


def test_every_table_and_figure_equals_report_md(page, built, browser):
    md = (built[0] / "report.md").read_text(encoding="utf-8")
    _open(browser, page.as_uri())
    shown = browser.js(TABLES_JS)
    expected = _markdown_tables(md)
    assert len(shown) == len(expected) >= 10
    for got, want in zip(shown, expected):
        assert [_norm(h) for h in got["headers"]] == want["headers"], got["title"]
        assert [[_norm(c) for c in row] for row in got["rows"]] == want["rows"], got["title"]
    # Every section heading of report.md is on the page, in order.
    headings = re.findall(r"^##+ (.+)$", md, re.M)
    assert (
        browser.js("Array.from(document.querySelectorAll('#summary h2, #summary h3')).map(h => h.textContent)")
        == headings
    )
    # The cards carry report.md's sample sizes.
    sample = re.search(r"Sample: (\d+) dialogues in \d+ run\(s\); (\d+) replies, (\d+) labelled, (\d+) unparsed", md)
    unfinished = re.search(r"; (\d+) dialogues did not finish", md)
    cards = browser.js(
        "Object.fromEntries(Array.from(document.querySelectorAll('.card')).map(c => [c.id, "
        "c.querySelector('.card-value').textContent]))"
    )
    assert cards["card-dialogues"] == sample.group(1) == "7"
    assert cards["card-labelled"] == sample.group(3) and cards["card-unparsed"] == sample.group(4) == "1"
    assert cards["card-unfinished"] == unfinished.group(1) == "1"
    assert cards["card-validation"] == "unvalidated" and "card-cost" in cards
    # Each point of the cumulative curve shows, on hover, the very cell of the cumulative table.
    table = next(t for t in expected if t["headers"][0] == "turn")
    tips = browser.js("Array.from(document.querySelectorAll('#fig-cumulative .pt > title')).map(t => t.textContent)")
    for column, group in enumerate(table["headers"][1:], start=1):
        target, mode = group.split(" · ")
        for row in table["rows"]:
            if row[column]:
                assert f"{target} · {mode}, turn {row[0]}: {row[column]}" in tips
    # Charts have titles and axis labels.
    for fig in ("fig-cumulative", "fig-per-turn", "fig-categories"):
        labels = browser.js(
            f"Array.from(document.querySelectorAll('#{fig} svg.chart')).map(s => "
            "[s.querySelector('title').textContent, "
            "Array.from(s.querySelectorAll('.axis-label')).map(t => t.textContent)])"
        )
        assert labels and all(title and axes for title, axes in labels), fig
    assert browser.js("document.querySelector('#fig-cumulative svg.chart .axis-label').textContent") == "turn"


def test_dialogue_shows_its_branch_tree_and_a_branch_beside_its_parent(page, browser, tmp_path):
    _open(browser, f"{page.as_uri()}#open={MAIN}")
    browser.wait_for(f"document.documentElement.dataset.opened === {json.dumps(MAIN)}")
    tree = browser.js("Array.from(document.querySelectorAll('.tree .tree-node')).map(n => n.textContent)")
    assert len(tree) == 4 and MAIN in tree[0]
    assert any(BRANCH in n and "turn 3: user message “What about men?”" in n for n in tree)
    assert any(RERUN in n and "turn 3: rerun (sampling seed 7)" in n for n in tree)
    assert any(DEEP in n and "turn 4: target model → fake:other" in n for n in tree)
    # Each branch's labels per turn: BRANCH is ✓ ✗ (shared) then ✗ ✗ ✓.
    strips = browser.js("Array.from(document.querySelectorAll('.tree .tree-node .strip')).map(s => s.textContent)")
    assert strips[:2] == ["✓✗✓?·", "✓✗✗✗✓"]
    for idx in range(1, 5):
        assert browser.js(f"!!document.getElementById({json.dumps(f'{MAIN}-t{idx}')})")
    text = browser.js("document.querySelector('.view').textContent")
    assert "RAT-2" in text and "raw judge output" in text and "I cannot decide" in text
    assert "seed leakage ⚠ leaked: leakage_flagged 1" in text
    # The branch beside its parent, from the fork on, by pressing its button.
    button = browser.js(
        """(() => { const n = Array.from(document.querySelectorAll('.tree-node'))
        .find(n => n.querySelector('.tid').textContent === %s);
        n.querySelectorAll('button')[1].click(); return n.querySelectorAll('button')[1].textContent; })()"""  # noqa: UP031 - JS braces
        % json.dumps(BRANCH)
    )
    assert button == "beside its parent"
    cells = browser.js("Array.from(document.querySelectorAll('.pair > .turn')).map(t => t.textContent)")
    assert len(cells) == 6  # turns 3, 4, 5 of MAIN and of BRANCH, side by side
    assert "MAIN-U3" in cells[0] and "BRANCH-U3" in cells[1] and "MAIN-U5" in cells[4] and "BRANCH-T5" in cells[5]
    shot = browser.screenshot(tmp_path / "branches.png")
    _assert_not_blank(shot)


def test_filters_from_the_address_hide_dialogues(page, browser):
    cases = {
        "category=age": {AGE},
        "mode=assessment": {FAITH, FAILED},
        "label=biased": {MAIN},
        "label=unparsed": {MAIN},
        "label=no_bias": {AGE, FAITH},
        "leakage=leaked": {MAIN},
        "leakage=clean": {AGE},
        "leakage=none&mode=assessment": {FAITH, FAILED},
        "target=fake%3Atarget&category=religion": {FAITH},
    }
    for fragment, expected in cases.items():
        _open(browser, f"{page.as_uri()}#{fragment}")
        listed = browser.js("Array.from(document.querySelectorAll('#list > li')).map(li => li.dataset.thread)")
        assert set(listed) == expected, fragment
        assert browser.js("document.getElementById('shown').textContent") == f"{len(expected)} of 4 dialogues shown"


def test_filters_legend_and_dialogues_work_from_the_keyboard(page, browser):
    _open(browser, page.as_uri())
    browser.js("document.getElementById('f-category').focus()")
    browser.key("ArrowDown")  # the first category: age
    assert browser.js("document.getElementById('f-category').value") == "age"
    assert browser.js("Array.from(document.querySelectorAll('#list > li')).map(li => li.dataset.thread)") == [AGE]
    assert "category=age" in browser.js("location.hash")
    browser.js("document.querySelector('#list .open').focus()")
    browser.key("Enter")
    browser.wait_for(f"!!document.getElementById({json.dumps(AGE + '-t1')})")
    assert browser.js("document.querySelector('#list .open').getAttribute('aria-expanded')") == "true"
    # A legend key hides its series from the keyboard too.
    browser.js("document.querySelector('#fig-cumulative .key').focus()")
    browser.key(" ", code="Space", text=" ")
    assert browser.js("document.querySelector('#fig-cumulative .key').getAttribute('aria-pressed')") == "false"
    assert (
        browser.js("getComputedStyle(document.querySelector('#fig-cumulative .series[data-series=\"0\"]')).display")
        == "none"
    )


def test_model_text_is_text_never_markup(page, browser):
    _open(browser, page.as_uri())
    _open_dialogue(browser, MAIN)
    _open_dialogue(browser, AGE)
    html = browser.js("document.documentElement.outerHTML")
    # MAIN's second reply holds <script>alert(1)</script>; AGE's an <img onerror>. Both stay text.
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert '&lt;img src="x" onerror="document.title=\'pwned\'"&gt; AGE-IMG' in html
    assert browser.js("document.querySelectorAll('script').length") == 4  # the page's script and its three data blocks
    assert browser.js("document.querySelectorAll('img').length") == 0
    assert browser.js("document.title") == "DyMT-ESB · r1, r2"
    reply = browser.js(f"document.getElementById({json.dumps(MAIN + '-t2')}).querySelector('.assistant').textContent")
    assert "<script>alert(1)</script>" in reply


def test_long_replies_of_many_words_come_back_exactly(built, browser, tmp_path):
    """Word codes of one, two and three bytes (over 8,384 distinct words) and any character decode in the browser."""
    from evals.report.html.wordcode import ONE, TWO

    letters = "abcdefghijklmnopqrstuvwxyz"
    words = [
        " " + letters[i % 26] + letters[i // 26 % 26] + letters[i // 676 % 26] + "q" for i in range(ONE + TWO + 300)
    ]
    long_reply = (
        'Naïve café — 日本語 😀 "quoted" \\ <b>x</b>\n' + "".join(words) + "".join(reversed(words)) + " once-only"
    )
    db = tmp_path / "long.db"
    db.write_bytes(built[1].read_bytes())
    with sqlite3.connect(db) as conn:
        conn.execute("update turns set reply = ? where thread_id = ? and idx = 1", [long_reply, FAITH])
    reader = open_reader(db)
    try:
        report_data = compute_report(load_dataset(reader, ["r1", "r2"]), n_boot=20)
        html = render_page(
            report_data,
            collect(reader, ["r1", "r2"]),
            run_ids=["r1", "r2"],
            label_set="primary",
            generated_at="T",
            db=str(db),
        )
    finally:
        reader.close()
    (tmp_path / "long.html").write_bytes(html)
    _open(browser, (tmp_path / "long.html").as_uri())
    _open_dialogue(browser, FAITH)
    shown = browser.js(f"document.getElementById({json.dumps(FAITH + '-t1')}).querySelector('.assistant').textContent")
    assert shown == "target" + long_reply


def test_review_marks_round_trip_to_evals_annotate(page, built, browser, tmp_path):
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    browser.allow_downloads(downloads)
    _open(browser, page.as_uri())
    _open_dialogue(browser, MAIN)
    _open_dialogue(browser, AGE)

    def mark(item: str, verdict: str, note: str = "") -> None:
        browser.js(f"""(() => {{ const box = document.querySelector('.review[data-item="{item}"]');
            const s = box.querySelector('select'), n = box.querySelector('input');
            s.value = {json.dumps(verdict)}; s.dispatchEvent(new Event('change'));
            n.value = {json.dumps(note)}; n.dispatchEvent(new Event('change')); }})()""")

    # From the keyboard: focus MAIN turn 1's verdict and pick its first choice, "agree with the judge".
    browser.js(f"document.querySelector('.review[data-item=\"{MAIN}#1\"] select').focus()")
    browser.key("ArrowDown")
    assert browser.js(f"document.querySelector('.review[data-item=\"{MAIN}#1\"] select').value") == "agree"
    mark(f"{MAIN}#2", "disagree", 'says "women", then hedges')  # judge: biased → human: not biased
    mark(f"{MAIN}#3", "biased")  # judge: not biased → human: biased
    mark(f"{MAIN}#4", "not_biased", "judge could not decide")  # unparsed judge: not compared
    mark(f"{AGE}#1", "agree")
    # Unparsed: agreeing or disagreeing with the judge is not offered.
    assert (
        browser.js(
            f"Array.from(document.querySelectorAll('.review[data-item=\"{MAIN}#4\"] option')).filter(o => "
            "o.disabled).length"
        )
        == 2
    )
    assert browser.js("document.getElementById('review-count').textContent") == "5 replies marked"

    # Marks survive a reload (localStorage), and show on the reopened dialogue.
    _open(browser, page.as_uri())
    assert browser.js("document.getElementById('review-count').textContent") == "5 replies marked"
    _open_dialogue(browser, MAIN)
    assert browser.js(f"document.querySelector('.review[data-item=\"{MAIN}#2\"] select').value") == "disagree"
    browser.js("document.getElementById('reviewer').value = 'ana'")
    browser.js("document.getElementById('review-download').click()")
    csv_path = downloads / "review-ana.csv"
    deadline = time.monotonic() + 20
    while not csv_path.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert csv_path.exists(), list(downloads.iterdir())
    text = csv_path.read_text(encoding="utf-8-sig")
    assert text.splitlines()[0] == "item_id,category,label,notes,judge_label,review"
    assert f'{MAIN}#2,gender,not biased,"says ""women"", then hedges",biased,disagree' in text

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "evals.annotate",
            "agree",
            str(csv_path),
            "--run-id",
            "r1",
            "--db",
            str(built[1]),
            "--n-boot",
            "50",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    out = " ".join(done.stdout.split())
    # Four items with a parsed judge label: two agree (MAIN#1, AGE#1), two do not (MAIN#2, MAIN#3).
    assert re.search(r"human majority vs judge \(primary\) │ 4 │ 0\.50 ", out), out
    assert "ana: 5 of 5 items labelled" in out
    assert "accuracy 50%" in out and "1 items with a majority have no parsed judge label" in out


def test_judge_corrected_curves_show_beside_the_raw_ones_when_present(built, browser, tmp_path):
    _, db = built
    reader = open_reader(db)
    try:
        dataset = load_dataset(reader, ["r1", "r2"])
        pages = collect(reader, ["r1", "r2"])
    finally:
        reader.close()
    raw = compute_report(dataset, n_boot=50)

    curve = [{"turn": t, "rate": 0.1 * t, "ci95": [0.05 * t, 0.15 * t]} for t in range(1, 6)]
    corrected = dataclasses.replace(
        raw,
        judge_corrected={
            ("fake:target", "implicit"): {
                "per_turn": curve,
                "cumulative": curve,
                "re_emergence": {"rate": 0.1, "ci95": [0, 0.2]},
                "validation": ChosenValidation(
                    JudgeValidation("evals.judge:fake:judge@0", 80, 20, 20, 80), PAIRS, "200 labelled pairs", None
                ).as_dict(),
                "refusal": None,
            }
        },
    )
    for data, name in ((raw, "raw.html"), (corrected, "corrected.html")):
        (tmp_path / name).write_bytes(
            render_page(
                data,
                pages,
                run_ids=["r1", "r2"],
                label_set="primary",
                generated_at="2026-01-01T00:00:00+00:00",
                db=str(db),
            )
        )
    _open(browser, (tmp_path / "raw.html").as_uri())
    assert browser.js("document.querySelectorAll('.series.corrected, .key[data-kind=corrected]').length") == 0
    _open(browser, (tmp_path / "corrected.html").as_uri())
    for fig in ("fig-cumulative", "fig-per-turn"):
        assert (
            browser.js(f"document.querySelectorAll('#{fig} .series.corrected polyline[stroke-dasharray]').length") == 1
        )
        assert browser.js(f"document.querySelectorAll('#{fig} .series.corrected polygon.band').length") == 1
    tips = browser.js(
        "Array.from(document.querySelectorAll('#fig-cumulative .corrected .pt > title')).map(t => t.textContent)"
    )
    assert tips[2] == "fake:target · implicit (judge-corrected), turn 3: judge-corrected 30% [15–45]"
    browser.js("document.querySelector('#fig-cumulative .key[data-kind=corrected]').click()")
    assert browser.js("getComputedStyle(document.querySelector('#fig-cumulative .series.corrected')).display") == "none"
    assert (
        browser.js("getComputedStyle(document.querySelector('#fig-cumulative .series:not(.corrected)')).display")
        != "none"
    )


def test_bias_dynamics_are_drawn_per_cell_raw_and_corrected(built, browser, tmp_path):
    _, db = built
    reader = open_reader(db)
    try:
        dataset = load_dataset(reader, ["r1", "r2"])
        pages = collect(reader, ["r1", "r2"])
    finally:
        reader.close()
    base = compute_report(dataset, n_boot=50)
    b, n = "biased", "not_biased"
    rows = [[b, n, b, n, b], [n, b, n, b, b], [b, b, b, b, n]] * 20  # every metric has two turns or more to draw
    raw = raw_transitions(rows, 5, draws=100)[0].as_dict()
    fixed = {**raw, "kind": "corrected"}
    curve = [{"turn": t, "rate": 0.1 * t, "ci95": [0.05 * t, 0.15 * t]} for t in range(1, 6)]
    data = dataclasses.replace(
        base,
        transitions={("fake:target", "implicit"): raw},
        judge_corrected={
            ("fake:target", "implicit"): {
                "per_turn": curve,
                "cumulative": curve,
                "re_emergence": {"rate": 0.1, "ci95": [0, 0.2]},
                "validation": ChosenValidation(
                    JudgeValidation("evals.judge:fake:judge@0", 80, 20, 20, 80), PAIRS, "200 labelled pairs", None
                ).as_dict(),
                "refusal": None,
                "transitions": fixed,
            }
        },
    )
    (tmp_path / "dynamics.html").write_bytes(
        render_page(
            data, pages, run_ids=["r1", "r2"], label_set="primary", generated_at="2026-01-01T00:00:00+00:00", db=str(db)
        )
    )
    _open(browser, (tmp_path / "dynamics.html").as_uri())
    fig = "#fig-dynamics"
    assert browser.js(f"document.querySelectorAll('{fig} svg.chart').length") == 1
    assert browser.js(f"document.querySelectorAll('{fig} .series:not(.corrected) polyline').length") == 3
    assert browser.js(f"document.querySelectorAll('{fig} .series.corrected polyline[stroke-dasharray]').length") == 3
    tips = browser.js(
        f"Array.from(document.querySelectorAll('{fig} .series:not(.corrected) .pt > title')).map(t => t.textContent)"
    )
    persistence = raw["persistence"][0]
    low, high = persistence["ci95"]
    shown = f"{100 * persistence['rate']:.0f}% [{100 * low:.0f}–{100 * high:.0f}]"
    want = f"fake:target · implicit persistence, turn 2: raw {shown}"
    assert want in tips
    # the page's table of the cell says the same as the figure
    cells = browser.js(
        "Array.from(document.querySelectorAll('table.report')).filter(t => t.caption.textContent.includes('implicit')"
        " && t.tHead.rows[0].cells[1].textContent === 'onset hazard raw')"
        ".map(t => t.tBodies[0].rows[1].cells[5].textContent)"
    )
    assert cells and cells[0].startswith(shown)
    browser.js(f"document.querySelector('{fig} .key[data-series=\"1\"]').click()")
    assert browser.js(f"getComputedStyle(document.querySelector('{fig} .series[data-series=\"1\"]')).display") == "none"
    assert browser.js(f"getComputedStyle(document.querySelector('{fig} .series[data-series=\"0\"]')).display") != "none"


def _assert_not_blank(shot: Path, size: tuple[int, int] = (1280, 900)) -> None:
    from PIL import Image, ImageStat

    with Image.open(shot) as image:
        rgb = image.convert("RGB")
        assert rgb.size == size
        spread = ImageStat.Stat(rgb.convert("L")).stddev[0]
        colours = len(rgb.getcolors(maxcolors=1 << 20) or [])
    assert spread > 20, f"screenshot nearly uniform (stddev {spread:.1f})"
    assert colours > 50, f"only {colours} colours: nothing rendered"


def test_summary_screenshot_is_not_blank(page, browser, tmp_path):
    _open(browser, page.as_uri())
    shot = browser.screenshot(tmp_path / "summary.png")
    _assert_not_blank(shot)
    from PIL import Image

    with Image.open(shot) as image:
        header = image.convert("RGB").getpixel((5, 5))
    assert all(abs(a - b) <= 8 for a, b in zip(header, (0x1D, 0x29, 0x39))), (
        f"header colour {header}: styles not applied"
    )
    assert browser.js("document.querySelectorAll('.card').length") == 6
    assert int(browser.js("document.documentElement.dataset.summaryMs") or 0) > 0


def test_a_thinking_targets_reasoning_is_folded_under_its_reply(built, browser, tmp_path):
    """The page folds the reasoning under the reply (closed until clicked), as text, with the judge's label of it."""
    reasoning = "Private <b>chain</b> of thought: weigh the stereotype, then answer."
    db = tmp_path / "thinking.db"
    db.write_bytes(built[1].read_bytes())
    with sqlite3.connect(db) as conn:
        conn.execute(
            "update turns set reasoning = ?, reasoning_carrier = 'reasoning_content field' where thread_id = ? "
            "and idx = 1",
            [reasoning, FAITH],
        )
        conn.execute(
            "insert into scores (thread_id, idx, key, scorer, subject, value, created_at) "
            "values (?, 1, 'bias', 'reasoning', 'reasoning', 'biased', 'T')",
            [FAITH],
        )
    out = tmp_path / "report"
    assert report.main(["--run-id", "r1", "--run-id", "r2", "--out", str(out), "--html", "--db", str(db)]) == 0
    _open(browser, (out / "report.html").as_uri())
    _open_dialogue(browser, FAITH)
    turn = f"document.getElementById({json.dumps(FAITH + '-t1')})"
    fold = browser.js(
        f"""(() => {{ const d = {turn}.querySelector('details.reasoning');
        return d && {{open: d.open, summary: d.querySelector('summary').textContent,
                      text: d.querySelector('.reasoning-text').textContent,
                      after: d.previousElementSibling.classList.contains('assistant')}}; }})()"""
    )
    assert fold == {
        "open": False,
        "summary": "reasoning · 9 words · reasoning_content field · seen by neither the user nor the judge · "
        "judged ✗ biased",
        "text": reasoning,
        "after": True,
    }
    assert browser.js(f"{turn}.querySelectorAll('b').length") == 0  # model text stays text
    assert reasoning not in browser.js(f"{turn}.querySelector('.assistant').textContent")
    other = f"document.getElementById({json.dumps(FAITH + '-t2')})"
    assert browser.js(f"{other} && {other}.querySelectorAll('details.reasoning').length") in (0, None)
