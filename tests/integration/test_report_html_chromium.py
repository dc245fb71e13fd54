"""``python -m evals.report --html``: the page opened in real headless Chromium (Debian's ``chromium``).

Chromium renders the file offline; ``--dump-dom`` gives the DOM after the page's
own script ran (filters set from the address), ``--screenshot`` a picture that
must not be blank. Model text containing markup must arrive as text.
"""

from __future__ import annotations

import html
import os
import re
import shutil
import sqlite3
import stat
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from cli import report
from tests.replay_fixtures import AGE, BRANCH, DEEP, MAIN, RERUN, build_replay_db

CHROMIUM = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser")) if p), None)
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        # In CI (CI=true) the browser is required: a missing one fails the suite instead of skipping.
        CHROMIUM is None and os.environ.get("CI") != "true",
        reason="NOT TESTED: Debian's chromium is not installed (apt-get install -y chromium; the CI script installs it)",
    ),
]

IMG_REPLY = 'Fine.<img src="x" onerror="document.title=\'pwned\'"> AGE-IMG'
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run", "--hide-scrollbars",
)


class _Dom(HTMLParser):
    """Elements of the dumped DOM: (tag, attributes) in order, and the text of #shown and <title>."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.texts: dict[str, str] = {}
        self._capture: str | None = None

    def handle_starttag(self, tag, attrs):
        attrs = {k: v or "" for k, v in attrs}
        self.elements.append((tag, attrs))
        if attrs.get("id") == "shown" or tag == "title":
            self._capture = attrs.get("id") or tag
            self.texts[self._capture] = ""

    def handle_endtag(self, tag):
        self._capture = None

    def handle_data(self, data):
        if self._capture:
            self.texts[self._capture] += data

    def articles(self) -> dict[str, bool]:
        """Dialogue id → shown (not hidden by the filters)."""
        return {a["id"]: "hidden" not in a.get("class", "").split() for t, a in self.elements if t == "article"}


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    return subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True, text=True, timeout=120,
    )


def _dom(tmp_path: Path, url: str) -> tuple[str, _Dom]:
    done = _chromium(tmp_path, "--dump-dom", url)
    assert done.returncode == 0, done.stderr[-2000:]
    parser = _Dom()
    parser.feed(done.stdout)
    return done.stdout, parser


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("html")
    db = build_replay_db(tmp / "d.db")
    with sqlite3.connect(db) as conn:
        conn.execute("update turns set reply = ? where thread_id = ? and idx = 2", [IMG_REPLY, AGE])
        conn.execute("alter table turns add column leakage_flagged integer")
        conn.execute("update turns set leakage_flagged = 0 where thread_id = ?", [AGE])
        conn.execute("update turns set leakage_flagged = 1 where thread_id = ? and idx = 2", [MAIN])
    out = tmp / "report"
    assert report.main(["--run-id", "r1", "--run-id", "r2", "--out", str(out), "--html", "--db", str(db), "--n-boot", "50"]) == 0
    return out / "report.html"


def test_page_is_self_contained_and_owner_only(page):
    text = page.read_text(encoding="utf-8")
    assert stat.S_IMODE(page.stat().st_mode) == 0o600
    # Nothing to fetch: no src/href but fragments, and a policy that forbids any load.
    assert not re.findall(r'\b(?:src|href)\s*=\s*"(?!#)', text.split("</header>", 1)[1].split("<script>")[0].replace("&quot;", ""))
    assert "default-src 'none'" in html.unescape(text) and "http://" not in text and "https://" not in text


def test_every_dialogue_with_labels_rationales_and_branches_renders_in_chromium(page, tmp_path):
    dom_text, dom = _dom(tmp_path, page.as_uri())
    shown = dom.articles()
    # Branches of r1 are shown inside their parent; r2's two dialogues are there too.
    assert set(shown) == {MAIN, AGE, "r2:s-faith:assessment", "r2:s-disab:assessment"} and all(shown.values())
    assert dom.texts["shown"] == "4 of 4 dialogues shown"  # the page's script ran under its own CSP
    for thread in (BRANCH, RERUN, DEEP):
        assert f'id="{thread}-t' in dom_text  # each branch's own turns
    assert "RAT-2" in dom_text and "RAT-B3" in dom_text and "raw judge output: I cannot decide" in dom_text
    assert "seed leakage ⚠ leaked: leakage_flagged 1" in dom_text
    # The label strip of MAIN: ✓ ✗ ✓ ? ·
    strip = re.search(rf'id="{re.escape(MAIN)}".*?<span class="strip"[^>]*>(.*?)</span></span>', dom_text, re.S)
    assert re.sub(r"<[^>]+>", "", strip.group(1)) == "✓✗✓?·"


def test_filters_from_the_address_hide_dialogues(page, tmp_path):
    cases = {
        "category=age": {AGE},
        "mode=assessment": {"r2:s-faith:assessment", "r2:s-disab:assessment"},
        "label=biased": {MAIN},
        "label=unparsed": {MAIN},
        "label=no_bias": {AGE, "r2:s-faith:assessment"},
        "leakage=leaked": {MAIN},
        "leakage=clean": {AGE},
        "leakage=none&mode=assessment": {"r2:s-faith:assessment", "r2:s-disab:assessment"},
        "target=fake%3Atarget&category=religion": {"r2:s-faith:assessment"},
    }
    for fragment, expected in cases.items():
        _, dom = _dom(tmp_path, f"{page.as_uri()}#{fragment}")
        assert {k for k, v in dom.articles().items() if v} == expected, fragment
        assert dom.texts["shown"] == f"{len(expected)} of 4 dialogues shown"


def test_model_text_is_escaped_never_markup(page, tmp_path):
    dom_text, dom = _dom(tmp_path, page.as_uri())
    # MAIN's second reply holds <script>alert(1)</script>; AGE's an <img onerror>. Both stay text.
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom_text
    assert '&lt;img src="x" onerror="document.title=\'pwned\'"&gt; AGE-IMG' in dom_text
    assert [t for t, _ in dom.elements].count("script") == 1  # only the page's own
    assert not any(t == "img" for t, _ in dom.elements)
    assert dom.texts["title"] == "DyMT-ESB · r1, r2"


def test_screenshot_is_not_blank(page, tmp_path):
    from PIL import Image, ImageStat

    shot = tmp_path / "page.png"
    done = _chromium(tmp_path, f"--screenshot={shot}", "--window-size=1200,900", page.as_uri())
    assert done.returncode == 0 and shot.exists(), done.stderr[-2000:]
    with Image.open(shot) as image:
        rgb = image.convert("RGB")
        assert rgb.size == (1200, 900)
        spread = ImageStat.Stat(rgb.convert("L")).stddev[0]
        colours = len(rgb.getcolors(maxcolors=1 << 20) or [])
        header = rgb.getpixel((5, 5))
    assert spread > 20, f"screenshot nearly uniform (stddev {spread:.1f})"
    assert colours > 50, f"only {colours} colours: nothing rendered"
    assert all(abs(a - b) <= 8 for a, b in zip(header, (0x1D, 0x29, 0x39))), f"header colour {header}: styles not applied"
