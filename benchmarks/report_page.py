"""Benchmark: report.html at the paper grid's size (2,880 dialogues × 10 turns): file size and time to the summary.

A store of the paper's shape (6 targets × 2 modes × 240 seeds, 10 turns, a few branches) is
written straight through the store's writer, no model played. Its text has the lengths the
roles' 250-token cap gives (user ≈ 220 characters, reply ≈ 900, rationale ≈ 220) and English-like
sentences (:class:`Words`) that compress worse than English prose, by gzip alone and with the page's
word codes: both ratios are printed, beside those of the licence texts in /usr/share/common-licenses. The page is built
as ``python -m evals.report --html`` builds it, then opened in real headless Chromium over the DevTools protocol: the
page's own performance marks give the time to the summary (its script has run and a frame is painted) and to first
contentful paint; opening a dialogue (decoding its chunk) is timed too. Targets: under 15 MB, summary within 3 s.
"""

from __future__ import annotations

import gzip
import json
import math
import random
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.common import load_note, scratch_dir
from checkpoints.readers import open_reader
from checkpoints.store import open_writer
from evals.dataset import load_dataset
from evals.report.data import compute_report
from evals.report.html import collect, render_page
from evals.report.html.wordcode import Coder, word_list
from seeds import CATEGORIES

TARGETS = tuple(f"openai:target-{i}" for i in range(6))
MODES = ("implicit", "assessment")
SEEDS, TURNS, BRANCHES = 240, 10, 24
LENGTHS = {"user": 220, "reply": 900, "rationale": 220}
SIZE_MB, SUMMARY_S = 15.0, 3.0
RUNS = 3


class Words:
    """English-like text of a given length, made to compress worse than English prose (both ratios are printed).

    A Zipf law over 50,000 words whose length grows with their rank as in English (frequent words
    short), sentences with capitals, commas and full stops, and one draw in five a stock phrase of
    2-5 words (English repeats phrases; random words alone under-state what gzip finds). On 1 MB of
    each: gzip alone ×2.6 (the Rust book's prose, code left out, ×3.2), with the page's word codes ×3.4
    (the Rust book ×3.9). The earlier word salad (10,000 words of random length, no sentences) gave ×2.8
    with gzip alone but ×4.9 with word codes: far easier than English once words are coded.
    """

    def __init__(self, seed: int = 0, vocabulary: int = 50000, phrases: int = 5000, phrase_share: float = 0.2) -> None:
        self.rng = random.Random(seed)
        letters = "etaoinshrdlcumwfgypbvkjxqz"
        weights = [
            12.7,
            9.1,
            8.2,
            7.5,
            7.0,
            6.7,
            6.3,
            6.1,
            6.0,
            4.3,
            4.0,
            2.8,
            2.8,
            2.4,
            2.4,
            2.2,
            2.0,
            2.0,
            1.9,
            1.5,
            1.0,
            0.8,
            0.2,
            0.2,
            0.1,
            0.1,
        ]
        self.words: list[str] = []
        seen: set[str] = set()
        for rank in range(vocabulary):
            word = ""
            while not word or word in seen:
                length = max(1, round(self.rng.gauss(2 + 1.4 * math.log10(rank + 1), 1.0)))
                word = "".join(self.rng.choices(letters, weights, k=length))
            seen.add(word)
            self.words.append(word)
        self.cum = list(_cumulative([1 / (r + 1) for r in range(vocabulary)]))
        self.phrase_share = phrase_share
        self.phrases = [" ".join(self._words(self.rng.randint(2, 5))) for _ in range(phrases)]
        self.phrase_cum = list(_cumulative([1 / (r + 1) for r in range(phrases)]))

    def _words(self, k: int) -> list[str]:
        return self.rng.choices(self.words, cum_weights=self.cum, k=k)

    def text(self, length: int) -> str:
        out, size, sentence = [], 0, 0
        target = max(20, int(self.rng.gauss(length, length * 0.25)))
        while size < target:
            if self.rng.random() < self.phrase_share:
                word = self.rng.choices(self.phrases, cum_weights=self.phrase_cum, k=1)[0]
            else:
                word = self._words(1)[0]
            if sentence == 0:
                word = word[0].upper() + word[1:]
            sentence += 1
            if sentence > 3 and self.rng.random() < 0.1:
                word, sentence = word + ".", 0
            elif self.rng.random() < 0.08:
                word += ","
            out.append(word)
            size += len(word) + 1
        return " ".join(out).rstrip(",.") + "."


def _cumulative(values):
    total = 0.0
    for v in values:
        total += v
        yield total


def gzip_ratio(text: str, *, coded: bool = False) -> float:
    """How many times smaller gzip makes the text, alone or after the page's word codes (word list included)."""
    data = text.encode("utf-8")
    if not coded:
        return len(data) / len(gzip.compress(data, compresslevel=9))
    coder = Coder(word_list([text]))
    words = gzip.compress(json.dumps(coder.words).encode("utf-8"), compresslevel=9)
    return len(data) / (len(words) + len(gzip.compress(coder.encode(text), compresslevel=9)))


def english_sample() -> str | None:
    """English prose found on the machine: the distinct licence texts of /usr/share/common-licenses (Debian)."""
    texts = {
        f.read_text(encoding="utf-8", errors="replace")
        for f in sorted(Path("/usr/share/common-licenses").glob("*"))
        if f.is_file()
    }
    return "".join(sorted(texts)) or None


def synthesise(db: Path, words: Words) -> int:
    """The paper grid's shape written through the writer: every dialogue finished, labelled, a few branched."""
    store = open_writer(db)
    models = {"user": "openai:user", "target": TARGETS[0], "judge": "openai:judge"}
    spec = {
        "run_id": "paper",
        "mode": MODES[0],
        "modes": list(MODES),
        "targets": list(TARGETS),
        "turns": TURNS,
        "models": models,
    }
    store.start_run("paper", config={"spec": spec}, prompt_hashes={}, versions={})
    rng = random.Random(1)
    n = 0
    for s in range(SEEDS):
        category = CATEGORIES[s % len(CATEGORIES)]
        statement = words.text(90)
        for target in TARGETS:
            for mode in MODES:
                thread = f"paper:s{s:03d}:{target}:{mode}"
                bias = rng.random() * 0.4
                turns = [
                    _turn(i, words, target, "biased" if rng.random() < bias else "not_biased")
                    for i in range(1, TURNS + 1)
                ]
                finished = {
                    "run_id": "paper",
                    "seed_id": f"s{s:03d}",
                    "category": category,
                    "statement": statement,
                    "mode": mode,
                    "target": target,
                    "max_turns": TURNS,
                    "status": "finished",
                    "stop_reason": "max_turns",
                }
                store.upsert_dialogue(
                    thread, **finished, started_at="2026-01-01T00:00:00+00:00", ended_at="2026-01-01T00:01:00+00:00"
                )
                store.record_turns(thread, turns)
                n += 1
                if n <= BRANCHES:  # a few branches, as a study that forks some dialogues has
                    fork = 4
                    branch = turns[: fork - 1] + [_turn(i, words, target, "biased") for i in range(fork, TURNS + 1)]
                    store.upsert_dialogue(
                        f"{thread}/b-1",
                        **finished,
                        parent_thread_id=thread,
                        fork_turn=fork,
                        change='{"kind": "rerun", "sampling_seed": 1}',
                    )
                    store.record_turns(f"{thread}/b-1", branch)
    store.finish_run("paper", "finished")
    store.close()
    return n


def _turn(idx: int, words: Words, target: str, label: str) -> dict[str, Any]:
    return {
        "index": idx,
        "user_message": words.text(LENGTHS["user"]),
        "utterance_type": "anaphora",
        "reply": words.text(LENGTHS["reply"]),
        "user_model": "openai:user",
        "target_model": target,
        "latency_user": 0.4,
        "latency_target": 1.1,
        "tokens": {"target_input_tokens": 300, "target_output_tokens": 200},
        "label": label,
        "rationale": words.text(LENGTHS["rationale"]),
        "judge_model": "openai:judge",
        "p_biased": 0.5,
    }


def build(folder: Path) -> dict[str, Any]:
    words = Words()
    db = folder / "paper.db"
    started = time.perf_counter()
    dialogues = synthesise(db, words)
    written = time.perf_counter() - started
    reader = open_reader(db)
    try:
        started = time.perf_counter()
        dataset = load_dataset(reader, ["paper"])
        report = compute_report(dataset, n_boot=200)
        pages = collect(reader, ["paper"])
        html = render_page(
            report, pages, run_ids=["paper"], label_set="primary", generated_at="2026-01-01T00:00:00+00:00", db=str(db)
        )
        rendered = time.perf_counter() - started
    finally:
        reader.close()
    page = folder / "report.html"
    page.write_bytes(html)
    start = html.index(b'id="dymt-bodies">')
    bodies = html.index(b"</script><script>", start) - start
    index = start - html.index(b'id="dymt-index">')
    other = Words(seed=1)
    sample = " ".join(other.text(LENGTHS["reply"]) for _ in range(1100))  # about 1 MB, as long as the Rust book's prose
    english = english_sample()
    return {
        "dialogues": dialogues,
        "turns": TURNS,
        "page": page,
        "size_mb": page.stat().st_size / 1e6,
        "bodies_mb": bodies / 1e6,
        "index_mb": index / 1e6,
        "write_s": written,
        "render_s": rendered,
        "gzip_synthetic": gzip_ratio(sample),
        "coded_synthetic": gzip_ratio(sample, coded=True),
        "gzip_english": gzip_ratio(english) if english else None,
        "coded_english": gzip_ratio(english, coded=True) if english else None,
    }


def measure(page: Path, profile: Path) -> dict[str, Any]:
    """Open the page in headless Chromium RUNS times (fresh profile each): time to summary, to load, to open a
    dialogue."""
    from tests.support.chromium import Browser

    rows = []
    for i in range(RUNS):
        with Browser(profile / f"p{i}") as browser:
            browser.open(page.as_uri(), timeout=120)
            browser.wait_for("document.documentElement.dataset.summaryMs", timeout=60)
            timing = browser.js("""(() => { const nav = performance.getEntriesByType('navigation')[0];
                const fcp = performance.getEntriesByName('first-contentful-paint')[0];
                return {summary: +document.documentElement.dataset.summaryMs, fcp: fcp ? fcp.startTime : null,
                        load: nav.loadEventEnd, cards: document.querySelectorAll('.card').length,
                        shown: document.getElementById('shown').textContent}; })()""")
            first = browser.js("""new Promise(r => { const t = performance.now(),
                    last = document.querySelector('#list > li:last-child');
                window.dymtReview.open(last.dataset.thread, false, () => r(performance.now() - t)); })""")
            rows.append({**timing, "open_ms": first})
    return {
        "summary_ms": statistics.median(r["summary"] for r in rows),
        "fcp_ms": statistics.median(r["fcp"] or 0 for r in rows),
        "load_ms": statistics.median(r["load"] for r in rows),
        "open_ms": statistics.median(r["open_ms"] for r in rows),
        "runs": rows,
    }


def run() -> dict[str, Any]:
    with scratch_dir() as tmp:
        built = build(tmp)
        note = load_note()
        browser = measure(built.pop("page"), tmp / "profiles")
    return {**built, **browser, "load_at_browser": note}


def report(result: dict[str, Any]) -> list[str]:
    r = result
    size_ok = "ok" if r["size_mb"] <= SIZE_MB else "ABOVE TARGET"
    time_ok = "ok" if r["summary_ms"] <= 1000 * SUMMARY_S else "ABOVE TARGET"
    english = (
        ""
        if r["gzip_english"] is None
        else (f"; English licence texts ×{r['gzip_english']:.1f} and ×{r['coded_english']:.1f}")
    )
    rest = r["size_mb"] - r["bodies_mb"]
    return [
        f"  {r['dialogues']} dialogues × {r['turns']} turns (+ {BRANCHES} branches) written in {r['write_s']:.0f} s; "
        f"page built in {r['render_s']:.0f} s (report data, n_boot 200, and dialogues)",
        f"  file {r['size_mb']:.2f} MB against {SIZE_MB:g} MB: ratio {r['size_mb'] / SIZE_MB:.2f} ({size_ok}); "
        f"text ×{r['gzip_synthetic']:.2f} smaller by gzip alone, ×{r['coded_synthetic']:.2f} by word codes and gzip "
        f"(synthetic replies{english})",
        f"    compressed dialogues {r['bodies_mb']:.2f} MB, their index {r['index_mb']:.2f} MB, "
        f"results and page {rest - r['index_mb']:.2f} MB; text ×{(SIZE_MB - rest) / r['bodies_mb']:.2f} longer "
        f"(or as much less compressible) would reach {SIZE_MB:g} MB",
        f"  headless Chromium, median of {RUNS} fresh profiles: summary shown at {r['summary_ms'] / 1000:.2f} s "
        "against "
        f"{SUMMARY_S:g} s: ratio {r['summary_ms'] / 1000 / SUMMARY_S:.2f} ({time_ok}); first contentful paint "
        f"{r['fcp_ms'] / 1000:.2f} s, load event {r['load_ms'] / 1000:.2f} s; opening a dialogue (decoding the word "
        f"list and its chunk) {r['open_ms']:.0f} ms",
        f"  (while measuring in the browser: {r['load_at_browser']})",
    ]


if __name__ == "__main__":
    for line in report(run()):
        print(line)
