"""Tests for the seeds package: built-in set, JSONL loading and errors, FairMT-Bench, selection."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from seeds import CATEGORIES, Seed, SeedError, load_seeds

REPO_ROOT = Path(__file__).resolve().parents[3]
# FairMT-Bench has no licence, so it is read from the shared folder at run time, never copied.
FAIRMT_DIR = REPO_ROOT.parent / "shared" / "fairmt-bench"
needs_fairmt = pytest.mark.skipif(not FAIRMT_DIR.is_dir(), reason=f"FairMT-Bench data not present at {FAIRMT_DIR}")


def write_jsonl(path: Path, rows: list[object]) -> Path:
    """Write rows as JSONL; strings are written verbatim so tests can inject broken lines."""
    lines = [row if isinstance(row, str) else json.dumps(row) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def assert_one_line_error(source: str, *fragments: str) -> str:
    """Assert load_seeds(source) raises a single-line SeedError containing every fragment."""
    with pytest.raises(SeedError) as info:
        load_seeds(source)
    message = str(info.value)
    assert "\n" not in message and message.strip()
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    return message


# --- builtin -------------------------------------------------------------------------------


def test_builtin_has_enough_unique_well_formed_seeds() -> None:
    seeds = load_seeds()
    counts = Counter(s.category for s in seeds)
    assert set(counts) == set(CATEGORIES)
    assert all(counts[c] >= 5 for c in CATEGORIES)
    assert len({s.id for s in seeds}) == len(seeds)
    assert len({s.statement.lower() for s in seeds}) == len(seeds)
    for seed in seeds:
        assert re.fullmatch(rf"builtin-{seed.category}-\d\d", seed.id)
        assert seed.statement[0].isupper() and seed.statement.endswith(".")
        assert not seed.statement.endswith("..")


def test_builtin_is_ordered_by_category_then_id() -> None:
    seeds = load_seeds("builtin")
    keys = [(CATEGORIES.index(s.category), s.id) for s in seeds]
    assert keys == sorted(keys)


def test_seed_is_frozen_and_validated() -> None:
    seed = Seed("x", "gender", "A statement.")
    with pytest.raises(AttributeError):
        seed.id = "y"  # type: ignore[misc]
    with pytest.raises(SeedError):
        Seed("x", "colour", "A statement.")
    with pytest.raises(SeedError):
        Seed("x", "gender", "  ")


# --- JSONL ---------------------------------------------------------------------------------


def test_jsonl_round_trip(tmp_path: Path) -> None:
    rows = [
        {"id": "r2", "category": "race", "statement": "Test statement two."},
        {"id": "a1", "category": "age", "statement": "Test statement one."},
        {"id": "g1", "category": "gender", "statement": "Test statement three.", "extra": 1},
    ]
    path = tmp_path / "seeds.jsonl"
    a, b, c = (json.dumps(row) for row in rows)
    path.write_text(f"{a}\n\n   \n{b}\n{c}")  # blank lines are skipped; no final newline
    seeds = load_seeds(str(path))
    assert seeds == [
        Seed("a1", "age", "Test statement one."),
        Seed("g1", "gender", "Test statement three."),
        Seed("r2", "race", "Test statement two."),
    ]
    # Writing the loaded seeds back out and reloading gives the same seeds.
    again = write_jsonl(tmp_path / "again.jsonl", [vars(s) for s in seeds])
    assert load_seeds(str(again)) == seeds


def test_jsonl_missing_file() -> None:
    assert_one_line_error("/no/such/dir/seeds.jsonl", "/no/such/dir/seeds.jsonl", "not found")


def test_jsonl_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"id": "\xff\xfe"}\n')
    assert_one_line_error(str(path), f"{path}:1", "byte 0xff at column 9 is not UTF-8")


def test_jsonl_invalid_json_names_line(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "s.jsonl",
        [{"id": "a", "category": "age", "statement": "S."}, "", '{"id": "b", oops}'],
    )
    assert_one_line_error(str(path), f"{path}:3", "invalid JSON")


def test_jsonl_non_object_line(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "s.jsonl", [["a", "age", "S."]])
    assert_one_line_error(str(path), f"{path}:1", "JSON object")


@pytest.mark.parametrize("field", ["id", "category", "statement"])
@pytest.mark.parametrize("bad", ["missing", "", "   ", 7])
def test_jsonl_missing_or_empty_field_names_line_and_field(tmp_path: Path, field: str, bad: object) -> None:
    row: dict[str, object] = {"id": "b", "category": "age", "statement": "S."}
    if bad == "missing":
        del row[field]
    else:
        row[field] = bad
    path = write_jsonl(tmp_path / "s.jsonl", [{"id": "a", "category": "age", "statement": "S."}, row])
    assert_one_line_error(str(path), f"{path}:2", f"'{field}'")


def test_jsonl_unknown_category_lists_valid_ones(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "s.jsonl", [{"id": "a", "category": "Age", "statement": "S."}])
    assert_one_line_error(str(path), f"{path}:1", "'Age'", ", ".join(CATEGORIES))


def test_jsonl_duplicate_id(tmp_path: Path) -> None:
    row = {"id": "dup", "category": "age", "statement": "S."}
    path = write_jsonl(tmp_path / "s.jsonl", [row, {**row, "statement": "T."}])
    assert_one_line_error(str(path), f"{path}:2", "duplicate id 'dup'", "line 1")


@pytest.mark.parametrize("content", ["", "\n\n  \n"])
def test_jsonl_empty_file(tmp_path: Path, content: str) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text(content)
    assert_one_line_error(str(path), str(path), "no seeds")


# --- sources and selection -----------------------------------------------------------------


def test_unknown_source() -> None:
    assert_one_line_error("nonsense", "seed source 'nonsense' not found", "builtin", ".jsonl", "fairmt:DIR")


def test_directory_source_is_rejected(tmp_path: Path) -> None:
    assert_one_line_error(str(tmp_path), str(tmp_path), "directory")


@pytest.mark.parametrize(
    "kwargs", [{"per_category": 0}, {"limit": 0}, {"limit": -1}, {"per_category": True}, {"limit": 1.5}]
)
def test_counts_must_be_positive_integers(kwargs: dict[str, object]) -> None:
    with pytest.raises(SeedError, match=">= 1"):
        load_seeds(**kwargs)  # type: ignore[arg-type]


def test_unknown_category_filter_lists_valid_ones() -> None:
    with pytest.raises(SeedError) as info:
        load_seeds(categories=["gender", "colour"])
    assert "'colour'" in str(info.value) and ", ".join(CATEGORIES) in str(info.value)
    with pytest.raises(SeedError):
        load_seeds(categories="gender")
    with pytest.raises(SeedError):
        load_seeds(categories=[])


def test_builtin_selection_filter_sample_sort_limit() -> None:
    seeds = load_seeds(categories=["religion", "age"], per_category=3, sample_seed=7)
    assert Counter(s.category for s in seeds) == {"age": 3, "religion": 3}
    keys = [(CATEGORIES.index(s.category), s.id) for s in seeds]
    assert keys == sorted(keys)
    assert seeds == load_seeds(categories=["age", "religion"], per_category=3, sample_seed=7)
    # The pick within a category does not depend on which other categories are requested.
    for category in ("age", "religion"):
        alone = load_seeds(categories=[category], per_category=3, sample_seed=7)
        assert alone == [s for s in seeds if s.category == category]
    limited = load_seeds(categories=["religion", "age"], per_category=3, sample_seed=7, limit=4)
    assert limited == seeds[:4]
    # per_category larger than a category takes the whole category.
    assert len(load_seeds(categories=["gender"], per_category=1000)) == len(load_seeds(categories=["gender"]))


def test_sampling_seed_changes_builtin_pick() -> None:
    picks = {tuple(s.id for s in load_seeds(per_category=2, sample_seed=k)) for k in range(5)}
    assert len(picks) > 1


# --- FairMT-Bench --------------------------------------------------------------------------


def make_fake_fairmt(root: Path, turns_by_file: dict[str, list[list[str]]]) -> Path:
    """Build a FairMT-shaped folder from invented dialogues (no FairMT text is used)."""
    track = root / "FairMT_10K" / "Stereotype" / "Negative_Feedback"
    track.mkdir(parents=True)
    for name, dialogues in turns_by_file.items():
        items = [{f"{i}-turn Conv": turn for i, turn in enumerate(d)} for d in dialogues]
        (track / f"prompt_{name}.json").write_text(json.dumps(items))
    return root


def test_fairmt_extraction_on_invented_data(tmp_path: Path) -> None:
    invented = {
        name: [["Hello.", f"List some reasons why {name} widgets are blue.."]]
        for name in ("age", "appearance", "disable", "gender", "race", "religion")
    }
    invented["gender"] = [
        ["Hi.", "Other.", "List reasons why  some invented claim   holds?"],
        ["Hi.", "List reasons why Some Invented   claim holds."],
        ["Hi.", "List reasons why a second claim is made!!"],
    ]
    root = make_fake_fairmt(tmp_path / "fake", invented)
    seeds = load_seeds(f"fairmt:{root}")
    gender = [s for s in seeds if s.category == "gender"]
    assert sorted(s.statement for s in gender) == [
        "A second claim is made.",
        "Some invented claim holds.",
    ]
    disability = [s for s in seeds if s.category == "disability"]
    assert [s.statement for s in disability] == ["Disable widgets are blue."]
    for seed in seeds:
        assert re.fullmatch(rf"fairmt-{seed.category}-[0-9a-f]{{10}}", seed.id)


def test_fairmt_missing_dir(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    assert_one_line_error(f"fairmt:{missing}", str(missing), "FairMT_10K")


def test_fairmt_missing_file(tmp_path: Path) -> None:
    root = make_fake_fairmt(tmp_path / "fake", {"age": [["List reasons why x is y."]]})
    expected = root / "FairMT_10K" / "Stereotype" / "Negative_Feedback" / "prompt_appearance.json"
    assert_one_line_error(f"fairmt:{root}", str(expected), "not found")
    # Only the requested categories' files are needed.
    assert len(load_seeds(f"fairmt:{root}", categories=["age"])) == 1


@needs_fairmt
def test_fairmt_full_load_is_clean_and_deduplicated() -> None:
    seeds = load_seeds(f"fairmt:{FAIRMT_DIR}")
    counts = Counter(s.category for s in seeds)
    assert set(counts) == set(CATEGORIES)
    assert all(counts[c] >= 40 for c in CATEGORIES)
    assert len({s.id for s in seeds}) == len(seeds)
    keys = {(s.category, " ".join(s.statement.lower().split())) for s in seeds}
    assert len(keys) == len(seeds)
    for seed in seeds:
        assert re.fullmatch(rf"fairmt-{seed.category}-[0-9a-f]{{10}}", seed.id)
        assert len(seed.statement) > 1 and seed.statement.endswith(".")
        assert not seed.statement.endswith("..")
        assert seed.statement[0] == seed.statement[0].upper()
        assert "reasons why" not in seed.statement.lower()


@needs_fairmt
def test_fairmt_per_category_sample_is_deterministic() -> None:
    source = f"fairmt:{FAIRMT_DIR}"
    first = load_seeds(source, per_category=40)
    assert len(first) == 240 and len({s.id for s in first}) == 240
    assert Counter(s.category for s in first) == {c: 40 for c in CATEGORIES}
    assert all(s.statement.strip() and s.statement.endswith(".") for s in first)
    assert load_seeds(source, per_category=40) == first
    assert load_seeds(source, per_category=40, sample_seed=1) != first


@needs_fairmt
def test_fairmt_relative_path_from_repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO_ROOT)
    relative = Path("..") / "shared" / "fairmt-bench"
    assert load_seeds(f"fairmt:{relative}", categories=["age"], limit=3) == load_seeds(
        f"fairmt:{FAIRMT_DIR}", categories=["age"], limit=3
    )


@needs_fairmt
def test_fairmt_categories_filter_and_limit() -> None:
    source = f"fairmt:{FAIRMT_DIR}"
    picked = load_seeds(source, categories=["race", "disability"], per_category=5)
    assert Counter(s.category for s in picked) == {"disability": 5, "race": 5}
    assert [s.category for s in picked] == ["disability"] * 5 + ["race"] * 5
    limited = load_seeds(source, per_category=40, limit=7)
    assert limited == load_seeds(source, per_category=40)[:7]
    assert all(s.category == "age" for s in limited)


def test_a_seed_file_as_editors_save_it_reads_and_a_bad_byte_is_named_by_line(tmp_path):
    """A UTF-8 byte-order mark and a statement holding U+2028 (valid JSON) read as written; a latin-1 byte is
    reported with its line and column."""
    from seeds.loaders import SeedError, load_jsonl

    lines = [
        {"id": "a", "category": "gender", "statement": "First\u2028line and\u2029more."},
        {"id": "b", "category": "age", "statement": "Second."},
    ]
    path = tmp_path / "seeds.jsonl"
    text = "\n".join(json.dumps(line, ensure_ascii=False) for line in lines) + "\r\n"
    path.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
    seeds = load_jsonl(path)
    assert [s.id for s in seeds] == ["a", "b"] and seeds[0].statement == "First\u2028line and\u2029more."
    path.write_bytes(
        text.encode("utf-8") + '{"id": "c", "category": "age", "statement": "caf\xe9"}\n'.encode("latin-1")
    )
    with pytest.raises(SeedError) as caught:
        load_jsonl(path)
    assert str(caught.value) == f"{path}:3: byte 0xe9 at column 49 is not UTF-8; save the seed file as UTF-8"
