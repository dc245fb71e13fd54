"""Research runs with fake models: repeated samples, paired comparison of a grid, cost, estimates and the cost cap."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from checkpoints.ids import sample_of, sample_thread_id
from checkpoints.samples import sample_seed
from tests.conftest import ScriptedChatModel

CREATED: list[tuple[str, str, int | None]] = []  # (spec, role, sampling seed) of every model built
MODELS: list[ScriptedChatModel] = []


def _register(providers) -> None:
    def factory(name, role, sampling):
        replies = {
            "user": lambda m, n: f"Question {n}?",
            # One target answers with text the judge below calls biased, the other never does.
            "target": lambda m, n: f"Biased answer {n}." if name == "biased" else f"Answer {n}.",
            "judge": lambda m, n: (
                "Rationale: r.\nLabel: "
                + (
                    "biased"
                    if "Biased answer" in str(m[-1].content) or "MARKED" in str(m[-1].content)
                    else "not biased"
                )
            ),
        }
        CREATED.append((f"rfake:{name}", role, sampling.seed))
        model = ScriptedChatModel(respond=replies[role], calls=[])
        MODELS.append(model)
        return model, f"rfake:{name}", "chat"

    providers("rfake", factory)


def _calls() -> int:
    return sum(len(m.calls) for m in MODELS)


GRID = [
    "--user-model",
    "rfake:u",
    "--judge-model",
    "rfake:j",
    "--target-model",
    "rfake:clean",
    "rfake:biased",
    "--turns",
    "2",
    "--categories",
    "gender",
    "age",
    "--no-trace",
]


def _run(capsys, *argv: str, status: int = 0) -> dict:
    from cli import run

    assert run.main([*argv, "--json"]) == status
    return json.loads(capsys.readouterr().out)


def test_sample_thread_ids_and_seeds():
    assert sample_thread_id("r:s:implicit", 0) == "r:s:implicit"
    assert sample_thread_id("r:s:implicit:hf:org/model", 2) == "r:s:implicit:hf:org/model#2"
    assert sample_of("r:s:implicit:hf:org/model#2") == 2 and sample_of("r:s:implicit") == 0
    assert sample_of("r:s:implicit#1/t3-abc") == 0  # a branch is its own dialogue
    seeds = {sample_seed(0, k) for k in range(50)}
    assert len(seeds) == 50 and sample_seed(7, 0) == 7 and sample_seed(0, 3) == sample_seed(0, 3)


def test_samples_grid_is_resumable_and_compared_on_the_same_seeds(tmp_path: Path, capsys, providers):
    from cli import compare, report

    _register(providers)
    db = tmp_path / "d.db"
    CREATED.clear()
    summary = _run(capsys, *GRID, "--samples", "2", "--db", str(db), "--run-id", "g")
    # 2 seeds × 2 targets × 2 samples, each its own thread.
    assert summary["dialogues"] == summary["finished"] == 8 and summary["samples"] == 2
    with sqlite3.connect(db) as con:
        threads = [t for (t,) in con.execute("select thread_id from dialogues order by thread_id")]
    assert sum(t.endswith("#1") for t in threads) == 4 and len(set(threads)) == 8
    assert {t.removesuffix("#1") for t in threads} == {t for t in threads if "#" not in t}
    # Sample 1 draws with its own sampling seed in every role.
    seeds_by_role: dict[tuple[str, str], set[int | None]] = {(spec, role): set() for spec, role, _ in CREATED}
    for spec, role, seed in CREATED:
        seeds_by_role[(spec, role)].add(seed)
    assert all(seeds == {0, sample_seed(0, 1)} for seeds in seeds_by_role.values()), seeds_by_role
    # Tokens per role are in the summary (the fake reports 7 in, 3 out per call): 8 dialogues × 2 turns.
    by_role = {(r["role"], r["spec"]): r for r in summary["cost"]["by_role"]}
    assert by_role[("judge", "rfake:j")]["calls"] == 16 and by_role[("judge", "rfake:j")]["input_tokens"] == 16 * 7
    assert by_role[("target", "rfake:biased")]["output_tokens"] == 8 * 3

    before = _calls()
    again = _run(capsys, *GRID, "--samples", "2", "--db", str(db), "--run-id", "g")
    assert again["skipped_this_time"] == 8 and _calls() == before  # resumed: nothing played twice

    assert compare.main(["--runs", "g", "--db", str(db), "--json", "--n-boot", "200"]) == 0
    [c] = json.loads(capsys.readouterr().out)["comparisons"]
    assert (c["a"]["target"], c["b"]["target"], c["varies"]) == ("rfake:clean", "rfake:biased", ["target"])
    assert (c["pairs"], c["seeds"]) == (4, 2)  # (seed, sample) pairs
    last = next(r for r in c["rows"] if r["measure"] == "cumulative" and r["turn"] == 2)
    assert (last["rate_a"], last["rate_b"], last["diff"]) == (0.0, 1.0, 1.0)
    assert (
        last["mcnemar"]["b"] == 0 and last["mcnemar"]["c"] == 4 and last["mcnemar"]["p_value"] == pytest.approx(0.125)
    )
    assert compare.main(["--runs", "g", "--db", str(db)]) == 0
    assert "rfake:biased · implicit vs rfake:clean · implicit" in capsys.readouterr().out

    out = tmp_path / "report"
    assert report.main(["--run-id", "g", "--db", str(db), "--out", str(out), "--n-boot", "100"]) == 0
    text = (out / "report.md").read_text()
    assert "## Paired comparisons" in text and "### rfake:biased · implicit vs rfake:clean · implicit" in text
    assert "## Repeated samples" in text and "resample seeds" in text.replace("resamples seeds", "resample seeds")
    spread = text.split("## Repeated samples")[1]
    assert "| rfake:biased | implicit |" in spread and "| 2 | 2/2 |" in spread
    assert "## Tokens and cost" in text and "No `--pricing FILE` given" in text


def _pricing(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "pricing.toml"
    path.write_text(body)
    return path


# Three output tokens a call at $1 each, nothing for input: $3 a call, $18 a dialogue of 2 turns.
PRICES = "".join(f'["rfake:{n}"]\ninput = 0\noutput = 1000000\n' for n in ("u", "j", "clean", "biased"))


def test_estimate_from_the_grid_then_from_stored_runs_writes_nothing(tmp_path: Path, capsys, providers):
    _register(providers)
    db = tmp_path / "d.db"
    pricing = _pricing(tmp_path, PRICES)
    first = _run(capsys, *GRID, "--samples", "3", "--db", str(db), "--estimate", "--pricing", str(pricing))
    assert not db.exists()  # nothing ran, nothing was written
    assert first["dialogues"] == 12 and first["model_calls"] == 12 * 2 * 3
    assert {r["basis"] for r in first["by_role"]} == {"default"}
    judge = next(r for r in first["by_role"] if r["role"] == "judge")
    assert judge["output_tokens"] == 24 * 250  # no history: max tokens per call, an upper bound

    _run(capsys, *GRID, "--db", str(db), "--run-id", "seen")
    size = db.stat().st_size
    second = _run(capsys, *GRID, "--samples", "3", "--db", str(db), "--estimate", "--pricing", str(pricing))
    assert db.stat().st_size == size
    assert {r["basis"] for r in second["by_role"]} == {"stored"}
    assert second["input_tokens"] == 72 * 7 and second["output_tokens"] == 72 * 3
    assert second["usd"] == pytest.approx(72 * 3.0)


def test_estimate_reads_stored_runs_from_a_postgres_store_and_writes_nothing(
    tmp_path: Path, capsys, providers, pg_url: str
):
    import psycopg

    _register(providers)
    pricing = _pricing(tmp_path, PRICES)
    _run(capsys, *GRID, "--db", pg_url, "--run-id", "seen")
    with psycopg.connect(pg_url) as conn:
        before = conn.execute("select (select count(*) from turns), (select count(*) from runs)").fetchone()
    estimate = _run(capsys, *GRID, "--samples", "3", "--db", pg_url, "--estimate", "--pricing", str(pricing))
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("select (select count(*) from turns), (select count(*) from runs)").fetchone() == before
    assert estimate["db"] == pg_url
    assert {r["basis"] for r in estimate["by_role"]} == {"stored"}
    assert estimate["input_tokens"] == 72 * 7 and estimate["output_tokens"] == 72 * 3
    assert estimate["usd"] == pytest.approx(72 * 3.0)


def test_max_cost_holds_new_dialogues_and_the_run_resumes(tmp_path: Path, capsys, providers):
    _register(providers)
    db = tmp_path / "d.db"
    pricing = _pricing(tmp_path, PRICES)
    args = [*GRID, "--db", str(db), "--run-id", "capped", "--pricing", str(pricing)]
    first = _run(capsys, *args, "--max-cost", "30", status=1)  # not every dialogue finished: exit 1
    # The first dialogue plays alone (the estimate without stored calls is an upper bound) and costs $18; a second
    # would bring the run to $36, past $30, so the other three are never started: the cap holds.
    assert first["finished"] == 1 and first["budget"]["held"] == 3 and first["held_this_time"] == 3
    assert first["budget"]["spent_usd"] == pytest.approx(18.0) and first["cost"]["usd"] == pytest.approx(18.0)
    assert first["budget"]["reserved_usd"] == 0 and first["budget"]["estimate_usd"] == pytest.approx(18.0)
    assert first["resume"].endswith(
        "--run-id capped --pricing " + str(pricing) + " --max-cost 30 --json --max-cost 60"
    )  # twice the cap: it runs as printed
    with sqlite3.connect(db) as con:
        assert con.execute("select status from runs where id = 'capped'").fetchone()[0] == "stopped"
        assert con.execute("select count(*) from dialogues").fetchone()[0] == 1

    same = _run(
        capsys, *args, "--max-cost", "30", status=1
    )  # the same cap again: the finished one is skipped, three still held
    assert (same["skipped_this_time"], same["budget"]["held"], same["finished"]) == (1, 3, 1)

    second = _run(capsys, *args, "--max-cost", "100")
    assert second["finished"] == second["dialogues"] == 4 and second["budget"]["held"] == 0
    assert second["skipped_this_time"] == 1 and second["cost"]["usd"] == pytest.approx(72.0)


def test_a_cost_cap_holds_with_dialogues_in_flight(tmp_path: Path, capsys, providers):
    """Four at once, $18 a dialogue, a $60 cap: a dialogue starts only if spent + what those in flight are expected to
    cost + its own expected cost fit; so 3 play ($54), the 4th is held, where starting all four would spend $72."""
    from cli.run import main

    _register(providers)
    pricing = _pricing(tmp_path, PRICES)
    args = [
        *GRID,
        "--db",
        str(tmp_path / "d.db"),
        "--run-id",
        "capped",
        "--pricing",
        str(pricing),
        "--max-concurrency",
        "4",
    ]
    first = _run(capsys, *args, "--max-cost", "60", status=1)
    assert first["finished"] == 3 and first["budget"]["held"] == 1
    assert (
        first["budget"]["spent_usd"] == pytest.approx(54.0)
        and first["budget"]["spent_usd"] <= first["budget"]["max_usd"]
    )
    assert first["budget"]["reserved_usd"] == 0
    capsys.readouterr()
    assert main([*args, "--max-cost", "60"]) == 1  # the summary in dollars: spent, reserved and cap
    err = " ".join(capsys.readouterr().out.split())
    assert "cost cap reached (spent $54.0000, reserved $0.0000 in flight, cap $60.00): 1 dialogues not started" in err


@pytest.mark.parametrize(
    "body, extra, expected",
    [
        ('["rfake:u"]\ninput = "cheap"\noutput = 1\n', [], "input must be a number >= 0"),
        ('["rfake:u"]\ninput = 1\n', [], "no 'output'"),
        ("not toml [", [], "is not valid TOML"),
        (
            '["rfake:u"]\ninput = 1\noutput = 1\n',
            ["--max-cost", "5"],
            "has no price for rfake:biased, rfake:clean, rfake:j",
        ),
        (None, ["--max-cost", "5"], "--max-cost needs --pricing FILE"),
    ],
)
def test_bad_pricing_is_one_line_exit_2_and_writes_nothing(tmp_path: Path, capsys, body, extra, expected, providers):
    from cli import run

    _register(providers)
    db = tmp_path / "d.db"
    pricing = ["--pricing", str(_pricing(tmp_path, body))] if body is not None else []
    with pytest.raises(SystemExit) as exit_info:
        run.main([*GRID, "--db", str(db), *pricing, *extra])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0], err
    assert not db.exists()


def test_report_prices_the_stored_tokens(tmp_path: Path, capsys, providers):
    from cli import report

    _register(providers)
    db = tmp_path / "d.db"
    _run(capsys, *GRID, "--db", str(db), "--run-id", "p", "--limit", "1")
    out = tmp_path / "report"
    assert (
        report.main(
            [
                "--run-id",
                "p",
                "--db",
                str(db),
                "--out",
                str(out),
                "--n-boot",
                "50",
                "--pricing",
                str(_pricing(tmp_path, PRICES)),
            ]
        )
        == 0
    )
    text = (out / "report.md").read_text()
    section = text.split("## Tokens and cost")[1].split("\n## ")[0]
    # 1 seed × 2 targets × 2 turns × 3 roles = 12 calls; none of the fake models reasons
    assert "| p | total |  |  | 84 | 36 | 0 | $36.0000 | $0.0000 |" in section


def test_summary_intervals_resample_seeds_when_seeds_are_sampled_again(tmp_path: Path, capsys, providers):
    from checkpoints.store import open_writer
    from evals.stats.metrics import summarise

    _register(providers)
    seeds = tmp_path / "seeds.jsonl"
    # The judge calls every reply biased when the seed statement is MARKED: samples of a seed agree.
    seeds.write_text(
        "".join(
            json.dumps(
                {"id": f"s{i}", "category": "gender", "statement": f"Statement {i}{' MARKED' if i % 3 == 0 else ''}."}
            )
            + "\n"
            for i in range(9)
        )
    )
    db = tmp_path / "d.db"
    summary = _run(
        capsys,
        "--user-model",
        "rfake:u",
        "--judge-model",
        "rfake:j",
        "--target-model",
        "rfake:clean",
        "--seeds",
        str(seeds),
        "--turns",
        "1",
        "--samples",
        "4",
        "--db",
        str(db),
        "--run-id",
        "k",
        "--no-trace",
    )
    assert summary["dialogues"] == 36
    store = open_writer(db)
    matrix = store.label_matrix("k")
    seed_of = {d["thread_id"]: d["seed_id"] for d in store.dialogues("k")}
    clustered = summarise(
        list(matrix.values()), 1, n_boot=1000, seed=0, delta_start=1, delta_end=1, clusters=[seed_of[t] for t in matrix]
    ).cumulative_rate[0]
    naive = summarise(list(matrix.values()), 1, n_boot=1000, seed=0, delta_start=1, delta_end=1).cumulative_rate[0]
    got = summary["cumulative"][0]
    assert got["rate"] == pytest.approx(1 / 3) and got["ci95"] == [clustered.low, clustered.high]
    assert (clustered.high - clustered.low) > 1.5 * (naive.high - naive.low)  # 9 seeds, not 36 dialogues


def test_compare_runs_bad_input_is_one_line_exit_2(tmp_path: Path, capsys, providers):
    from cli import compare, report

    _register(providers)
    db = tmp_path / "d.db"
    _run(
        capsys,
        "--user-model",
        "rfake:u",
        "--judge-model",
        "rfake:j",
        "--target-model",
        "rfake:clean",
        "--turns",
        "1",
        "--limit",
        "1",
        "--db",
        str(db),
        "--run-id",
        "one",
        "--no-trace",
    )
    for argv, expected in [
        (["--runs", "nope"], "no run 'nope'"),
        (["--runs", "one"], "hold one target and mode only"),
        (["--runs", "one", "--set", "x"], "not several"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            compare.main([*argv, "--db", str(db)])
        err = capsys.readouterr().err.strip().splitlines()
        assert exit_info.value.code == 2 and len(err) == 1 and expected in err[0], err
    bad = _pricing(tmp_path, '["rfake:u"]\ninput = -1\noutput = 1\n')
    with pytest.raises(SystemExit) as exit_info:
        report.main(["--run-id", "one", "--db", str(db), "--out", str(tmp_path / "r"), "--pricing", str(bad)])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(err) == 1 and "input must be a number >= 0" in err[0]
    assert not (tmp_path / "r").exists()


def test_experiment_file_keys_for_samples_pricing_and_the_cap(tmp_path: Path):
    from graph.config.experiment import ExperimentError, load_experiment

    path = tmp_path / "exp.toml"
    path.write_text('samples = 3\npricing = "prices.toml"\nmax_cost = 12.5\n')
    options = load_experiment(path).options
    assert options["samples"] == 3 and options["max_cost"] == 12.5
    assert options["pricing"] == tmp_path / "prices.toml"  # relative to the file
    path.write_text("max_cost = 0\n")
    with pytest.raises(ExperimentError, match="max_cost must be a number of USD > 0"):
        load_experiment(path)


def test_shipped_pricing_prices_every_model_of_the_paper():
    from evals.cost import load_pricing
    from graph.config.experiment import load_experiment
    from tests.conftest import REPO

    pricing = load_pricing(REPO / "examples" / "pricing.toml")
    paper = load_experiment(REPO / "examples" / "paper.toml").options
    assert (
        pricing.missing([paper["user_model"], paper["judge_model"], *paper["target_model"], "local:gemma3-270m"]) == []
    )
