"""report.html's generator without a browser: report.md's blocks as HTML, the packed dialogues, safe data blocks."""

from __future__ import annotations

import json
import re

import pytest

from checkpoints.readers import open_reader
from evals.dataset import load_dataset
from evals.report.data import compute_report
from evals.report.html import collect, render_page
from evals.report.html.dialogues import nodes_of, pack, unpack
from evals.report.html.page import _json_block
from evals.report.html.sections import block_html, inline
from evals.report.markdown import render_markdown, report_blocks
from evals.report.tables import TableData, markdown_table
from tests.support.replay_fixtures import BRANCH, DEEP, MAIN, MARKUP_REPLY, RERUN, build_replay_db


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    reader = open_reader(build_replay_db(tmp_path_factory.mktemp("page") / "d.db"))
    yield reader
    reader.close()


def test_report_md_is_its_blocks_joined(store):
    report = compute_report(load_dataset(store, ["r1", "r2"]), n_boot=20)
    blocks = report_blocks(report, db="d.db", generated_at="T")
    assert sum(isinstance(b, TableData) for b in blocks) >= 10
    joined = "\n\n".join(markdown_table(b) if isinstance(b, TableData) else b for b in blocks) + "\n"
    assert render_markdown(report, db="d.db", generated_at="T") == joined


def test_markdown_text_becomes_escaped_html():
    assert inline("*Bias*: `x <b>` and **bold** & <img onerror=1>") == (
        "<em>Bias</em>: <code>x &lt;b&gt;</code> and <strong>bold</strong> &amp; &lt;img onerror=1&gt;"
    )
    assert block_html("- one `a`\n- two", image=lambda a, f: "") == "<ul><li>one <code>a</code></li><li>two</li></ul>"
    assert block_html("## Re-emergence", image=lambda a, f: "") == '<h2 id="re-emergence">Re-emergence</h2>'
    assert (
        block_html("![Per-turn bias](per_turn_bias.png)", image=lambda a, f: f"[{a}|{f}]")
        == "[Per-turn bias|per_turn_bias.png]"
    )
    table = block_html(TableData("T <x>", ("a", "n"), (("<s>", "1%"),), left=1), image=lambda a, f: "")
    assert (
        "<caption>T &lt;x&gt;</caption>" in table
        and '<td class="num">1%</td>' in table
        and "<td>&lt;s&gt;</td>" in table
    )


def test_data_blocks_cannot_close_their_script():
    text = _json_block({"reply": "</script><script>alert(1)</script><!--"})
    assert "<" not in text and json.loads(text) == {"reply": "</script><script>alert(1)</script><!--"}


def test_dialogues_pack_into_an_index_and_compressed_bodies(store):
    index, blob = pack(collect(store, ["r1", "r2"]))
    rows = nodes_of(index)
    nodes = {n["id"]: n for n in rows}
    assert MAIN in [rows[i]["id"] for i in index["roots"]] and len(index["roots"]) == 4
    assert nodes[MAIN]["lab"] == "nbnu-" and nodes[BRANCH]["lab"] == "nbbbn"
    assert [rows[k]["id"] for k in nodes[MAIN]["kids"]] == [BRANCH, RERUN]
    assert nodes[DEEP]["fork"] == 4 and nodes[DEEP]["chg"] == "target model → fake:other"
    # Escaped so that the HTML parser keeps every byte: no NUL, CR or "<" is left in the block.
    assert not {0, 13, ord("<")} & set(blob)
    bodies = unpack(index, blob)
    assert [t[0] for t in bodies[MAIN]["turns"]] == [1, 2, 3, 4, 5]
    assert [t[0] for t in bodies[BRANCH]["turns"]] == [3, 4, 5]  # turns 1-2 are MAIN's
    assert bodies[MAIN]["turns"][1][2] == MARKUP_REPLY


def test_page_holds_no_model_text_in_its_markup(store):
    report = compute_report(load_dataset(store, ["r1", "r2"]), n_boot=20)
    data = render_page(
        report, collect(store, ["r1", "r2"]), run_ids=["r1", "r2"], label_set="primary", generated_at="T", db="d.db"
    )
    blob_start = data.index(b'id="dymt-bodies">')
    assert (
        max(data[:blob_start]) < 128 and max(data[data.index(b"</script><script>", blob_start) :]) < 128
    )  # ASCII around the data
    page = data.decode("windows-1252", errors="replace")
    assert 'charset="windows-1252"' in page[:200]
    assert "MAIN-T1" not in page and "alert(1)" not in page
    assert len(re.findall(r"<script>", page)) == 1 and page.count('type="application/json"') == 2
    assert not re.search(r'\b(?:src|href)="(?!#)', page)


def test_page_script_never_parses_text_as_markup():
    from evals.report.html.page import asset

    script = asset("page.js")
    assert not re.search(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function", script)
    assert max(map(ord, script + asset("page.css"))) < 128  # ASCII: the file around the data is ASCII
