"""CITATION.cff and README's BibTeX name the same paper, with every author."""

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
AUTHORS = ["Rem Hida", "Masahiro Kaneko", "Daisuke Oba", "Danushka Bollegala", "Naoaki Okazaki"]
TITLE = "DyMT-ESB: Dynamic Multi-Turn Evaluation of Social Bias in User-LLM Interactions"


def _names(entries: list[dict]) -> list[str]:
    return [f"{entry['given-names']} {entry['family-names']}" for entry in entries]


def test_citation_cff_names_the_paper_and_all_its_authors():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    paper = cff["preferred-citation"]
    assert paper["title"] == TITLE
    assert _names(paper["authors"]) == AUTHORS
    assert _names(cff["authors"]) == AUTHORS
    assert paper["year"] == 2026 and "EMNLP 2026" in paper["conference"]["name"]


def test_readme_bibtex_matches_citation_cff():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    entry = re.search(r"@inproceedings\{hida2026dymt,(.*?)\n\}", readme, re.S)
    assert entry, "README.md's How to cite has no @inproceedings{hida2026dymt, ...} entry"
    fields = dict(re.findall(r"(\w+)\s*=\s*\{(.*)\},?\n", entry.group(1) + "\n"))
    assert fields["title"].replace("{", "").replace("}", "") == TITLE
    bib_authors = [" ".join(reversed(name.split(", "))) for name in fields["author"].split(" and ")]
    assert bib_authors == AUTHORS
