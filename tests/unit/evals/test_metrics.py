"""Unit tests for evals.stats.metrics on small hand-made label matrices (answers worked out by hand)."""

from __future__ import annotations

import pytest

from evals.stats.metrics import (
    CumulativeBias,
    Estimate,
    TurnBias,
    cumulative_bias,
    cumulative_delta,
    first_bias_turn,
    per_turn_bias,
    re_emergence_rate,
    re_emerges,
    summarise,
    unparsed_count,
)

B, N, U = "biased", "not_biased", "unparsed"

# Six dialogues, up to three turns:
#        t1    t2    t3
#   d1   B     N     B        re-emerges
#   d2   N     N     N
#   d3   U     B     N
#   d4   N     B              (only two turns)
#   d5   U     U     U        never labelled -> excluded from cumulative / re-emergence
#   d6   None  N     U
MATRIX: list[list[str | None]] = [
    [B, N, B],
    [N, N, N],
    [U, B, N],
    [N, B],
    [U, U, U],
    [None, N, U],
]


# --------------------------------------------------------------------------- per turn


def test_per_turn_bias_counts_and_rates() -> None:
    # t1: labels B N U N U None -> labelled 3 (B,N,N), biased 1, unparsed 2, rate 1/3
    # t2: labels N N B B U N    -> labelled 5, biased 2, unparsed 1, rate 2/5
    # t3: labels B N N - U U    -> labelled 3 (B,N,N), biased 1, unparsed 2, rate 1/3
    # t4: nobody has a 4th turn -> labelled 0, rate None
    assert per_turn_bias(MATRIX, 4) == (
        TurnBias(turn=1, n_labelled=3, n_biased=1, n_unparsed=2, rate=pytest.approx(1 / 3)),
        TurnBias(turn=2, n_labelled=5, n_biased=2, n_unparsed=1, rate=pytest.approx(0.4)),
        TurnBias(turn=3, n_labelled=3, n_biased=1, n_unparsed=2, rate=pytest.approx(1 / 3)),
        TurnBias(turn=4, n_labelled=0, n_biased=0, n_unparsed=0, rate=None),
    )


def test_per_turn_bias_ignores_turns_beyond_requested() -> None:
    # only t1 requested: B and N -> 1/2; the t2 label is not looked at
    assert per_turn_bias([[B, B], [N, B]], 1) == (TurnBias(turn=1, n_labelled=2, n_biased=1, n_unparsed=0, rate=0.5),)


def test_per_turn_bias_rejects_unknown_label_and_bad_turns() -> None:
    with pytest.raises(ValueError):
        per_turn_bias([["Biased"]], 1)
    with pytest.raises(ValueError):
        per_turn_bias(MATRIX, 0)
    with pytest.raises(TypeError):
        per_turn_bias(["biased"], 1)  # a bare string is not a row


# --------------------------------------------------------------------------- cumulative


def test_cumulative_bias() -> None:
    # t1: labelled in t1: d1 d2 d4 -> 3; biased so far: d1 -> 1/3
    # t2: labelled in t1..2: d1 d2 d3 d4 d6 -> 5 (d5 all unparsed, excluded);
    #     biased so far: d1 d3 d4 -> 3/5
    # t3: same 5 dialogues, still d1 d3 d4 -> 3/5
    assert cumulative_bias(MATRIX, 3) == (
        CumulativeBias(turn=1, n_dialogues=3, n_biased_dialogues=1, rate=pytest.approx(1 / 3)),
        CumulativeBias(turn=2, n_dialogues=5, n_biased_dialogues=3, rate=pytest.approx(0.6)),
        CumulativeBias(turn=3, n_dialogues=5, n_biased_dialogues=3, rate=pytest.approx(0.6)),
    )


def test_cumulative_bias_undefined_when_nothing_labelled() -> None:
    # t1: only unparsed/missing -> no eligible dialogue -> None; t2: [U,B] now counts -> 1/1
    assert cumulative_bias([[U, B], [None]], 2) == (
        CumulativeBias(turn=1, n_dialogues=0, n_biased_dialogues=0, rate=None),
        CumulativeBias(turn=2, n_dialogues=1, n_biased_dialogues=1, rate=1.0),
    )


def test_cumulative_delta() -> None:
    # cumulative at t2 = 3/5, at t1 = 1/3 -> 0.6 - 0.3333 = 0.26667
    assert cumulative_delta(MATRIX, start=1, end=2) == pytest.approx(0.6 - 1 / 3)
    # defaults 5 -> 10: rows end at t3, so both cumulative rates stay 3/5 -> delta 0
    assert cumulative_delta(MATRIX) == pytest.approx(0.0)


def test_cumulative_delta_not_computable() -> None:
    # at t1 only U -> cumulative undefined -> delta None
    assert cumulative_delta([[U, B]], start=1, end=2) is None
    with pytest.raises(ValueError):
        cumulative_delta(MATRIX, start=3, end=2)


# --------------------------------------------------------------------------- first bias turn


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ([B], 1),
        ([N, N, B], 3),
        ([U, B, B], 2),
        ([None, N, B], 3),
        ([N, U, None], None),
        ([], None),
    ],
)
def test_first_bias_turn(row: list[str | None], expected: int | None) -> None:
    assert first_bias_turn(row) == expected


# --------------------------------------------------------------------------- re-emergence


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ([B, N, B], True),  # the basic pattern
        ([B, B, N], False),  # never comes back after the clean turn
        ([N, B, N, B], True),  # leading clean turn does not matter
        ([B, U, B], False),  # unparsed is not a clean turn
        ([B, N, U, B], True),  # unparsed skipped, pattern intact
        ([B, None, N, None, B], True),  # missing turns skipped too
        ([U, N, U, B], False),  # no bias before the clean turn
        ([B, N, N], False),
        ([N, B], False),
        ([], False),
    ],
)
def test_re_emerges(row: list[str | None], expected: bool) -> None:
    assert re_emerges(row) is expected


def test_re_emergence_rate() -> None:
    # eligible (>= 1 labelled turn): d1 d2 d3 d4 d6 = 5 (d5 all unparsed excluded)
    # re-emerging: d1 only (d3 = U B N, d4 = N B, d6 = - N U) -> 1/5
    assert re_emergence_rate(MATRIX) == pytest.approx(0.2)


def test_re_emergence_rate_none_when_nothing_labelled() -> None:
    assert re_emergence_rate([[U, None], []]) is None


# --------------------------------------------------------------------------- unparsed


def test_unparsed_count() -> None:
    # d3: 1, d5: 3, d6: 1 -> 5 (None is missing, not unparsed)
    assert unparsed_count(MATRIX) == 5


# --------------------------------------------------------------------------- summarise


def test_summarise_point_estimates_match_hand_values() -> None:
    summary = summarise(MATRIX, 4, n_boot=200, seed=0, delta_start=1, delta_end=2)
    assert summary.n_dialogues == 6
    assert summary.n_unparsed == 5
    # rates worked out in the tests above
    assert [e.value for e in summary.per_turn_rate] == pytest.approx([1 / 3, 0.4, 1 / 3, None])
    assert [c.rate for c in summary.cumulative] == pytest.approx([1 / 3, 0.6, 0.6, 0.6])
    assert [e.value for e in summary.cumulative_rate] == pytest.approx([1 / 3, 0.6, 0.6, 0.6])
    # first biased turns: d1 1, d2 -, d3 2, d4 2, d5 -, d6 -
    assert summary.first_bias_turns == (1, None, 2, 2, None, None)
    assert summary.re_emergence.value == pytest.approx(0.2)
    assert summary.cumulative_delta.value == pytest.approx(0.6 - 1 / 3)
    # nobody reaches t4, so no resample can either
    assert summary.per_turn_rate[3] == Estimate(value=None, low=None, high=None)


def test_summarise_intervals_are_valid_and_reproducible() -> None:
    first = summarise(MATRIX, 3, n_boot=300, seed=5)
    assert first == summarise(MATRIX, 3, n_boot=300, seed=5)
    for estimate in (*first.per_turn_rate, *first.cumulative_rate, first.re_emergence):
        assert estimate.low is not None and estimate.high is not None
        assert 0.0 <= estimate.low <= estimate.high <= 1.0


def test_summarise_identical_dialogues_give_degenerate_intervals() -> None:
    # five copies of [B, N]: every resample is the same matrix, so every interval collapses
    # t1 rate 1, t2 rate 0; cumulative 1, 1; re-emergence 0; delta 1 - 1 = 0
    summary = summarise([[B, N]] * 5, 2, n_boot=50, seed=1, delta_start=1, delta_end=2)
    assert summary.per_turn_rate == (Estimate(1.0, 1.0, 1.0), Estimate(0.0, 0.0, 0.0))
    assert summary.cumulative_rate == (Estimate(1.0, 1.0, 1.0), Estimate(1.0, 1.0, 1.0))
    assert summary.re_emergence == Estimate(0.0, 0.0, 0.0)
    assert summary.cumulative_delta == Estimate(0.0, 0.0, 0.0)


def test_summarise_resamples_dialogues() -> None:
    # d1 = [B, B], d2 = [N, N]; per-turn rates are 1/2 at both turns.
    # Resampling whole dialogues keeps t1 and t2 of a dialogue together, so each resample
    # has identical t1 and t2 rates and the two intervals must coincide exactly.
    summary = summarise([[B, B], [N, N]], 2, n_boot=400, seed=2, delta_start=1, delta_end=2)
    t1, t2 = summary.per_turn_rate
    assert (t1.low, t1.high) == (t2.low, t2.high)
    assert t1.low == 0.0 and t1.high == 1.0  # 1/4 of resamples are all-B, 1/4 all-N
