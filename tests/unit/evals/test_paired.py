"""Paired statistics of parents and branches on hand-made labels; every expected number is worked out below."""

from __future__ import annotations

import pytest

from evals.stats.counterfactual import BranchPair, compare_pairs, paired_turn, set_comparison_dict

B, N, U = "biased", "not_biased", "unparsed"


def pairs_at_turn_two(parent: list, branch: list, *, fork_turn: int = 2) -> list[BranchPair]:
    """One pair per (parent, branch) label at turn 2; turn 1 is shared and not biased."""
    return [BranchPair(f"p{i}", f"b{i}", fork_turn, [N, p], [N, b]) for i, (p, b) in enumerate(zip(parent, branch))]


def test_mcnemar_and_rates_on_known_table():
    # 12 pairs at turn 2: b = 1 (parent biased → branch not), c = 9 (parent not → branch biased),
    # 1 both biased, 1 both clean.
    # McNemar: n = 10, min = 1: 2 * (C(10,0) + C(10,1)) / 2^10 = 22 / 1024 = 0.021484375
    # parent rate = (1 + 1) / 12; branch rate = (9 + 1) / 12; difference = 8 / 12
    parent = [B] * 1 + [N] * 9 + [B] + [N]
    branch = [N] * 1 + [B] * 9 + [B] + [N]
    result = compare_pairs(pairs_at_turn_two(parent, branch), n_boot=500, seed=3)
    turn2 = result.per_turn[0]
    assert (result.first_turn, turn2.turn, turn2.n_pairs, turn2.n_dropped) == (2, 2, 12, 0)
    assert (turn2.mcnemar.b, turn2.mcnemar.c) == (1, 9)
    assert turn2.mcnemar.p_value == pytest.approx(0.021484375)
    assert turn2.parent_rate == pytest.approx(2 / 12)
    assert turn2.branch_rate == pytest.approx(10 / 12)
    assert turn2.diff.diff == pytest.approx(8 / 12)
    # Every resampled difference is (c* - b*) / 12 for counts drawn from these 12 pairs: a value in
    # [-1, 1] on a 1/12 grid; the interval brackets the estimate and excludes 0 for this lopsided table.
    assert 0 < turn2.diff.low <= 8 / 12 <= turn2.diff.high <= 1
    # Same seed, same interval.
    again = compare_pairs(pairs_at_turn_two(parent, branch), n_boot=500, seed=3).per_turn[0]
    assert (again.diff.low, again.diff.high) == (turn2.diff.low, turn2.diff.high)


def test_degenerate_table_gives_a_point_interval():
    # Every parent biased, every branch clean: diff = 0 - 1 = -1 in the sample and in every resample.
    # McNemar: b = 12, c = 0: 2 * C(12, 0) / 2^12 = 2 / 4096
    result = paired_turn([(B, N)] * 12, turn=3, n_boot=200, seed=0)
    assert (result.diff.diff, result.diff.low, result.diff.high) == (-1.0, -1.0, -1.0)
    assert (result.mcnemar.b, result.mcnemar.c) == (12, 0)
    assert result.mcnemar.p_value == pytest.approx(2 / 4096)


def test_no_discordant_pairs():
    # Identical labels: difference 0 with interval (0, 0); McNemar p = 1.
    result = paired_turn([(B, B)] * 3 + [(N, N)] * 4, turn=2, n_boot=100, seed=0)
    assert (result.diff.diff, result.diff.low, result.diff.high) == (0.0, 0.0, 0.0)
    assert result.mcnemar.p_value == 1.0


def test_unparsed_and_missing_labels_are_dropped_not_guessed():
    # 5 pairs; one unparsed branch, one missing parent: 3 kept, 2 dropped.
    # kept: (B, N), (N, B), (N, B) -> b = 1, c = 2, n = 3, min = 1: 2 * (1 + 3) / 8 = 1.0
    labels = [(B, N), (N, B), (N, B), (B, U), (None, B)]
    result = paired_turn(labels, turn=2, n_boot=100, seed=0)
    assert (result.n_pairs, result.n_dropped) == (3, 2)
    assert (result.mcnemar.b, result.mcnemar.c, result.mcnemar.p_value) == (1, 2, 1.0)
    assert result.diff.diff == pytest.approx(1 / 3)


def test_pairs_enter_only_from_their_fork_turn_and_any_bias():
    # BranchPair 1 forks at 2, pair 2 at 3. Turn 2 has only pair 1; turn 3 has both.
    pairs = [
        BranchPair("p1", "b1", 2, [N, N, B], [N, B, N]),
        BranchPair("p2", "b2", 3, [N, B, N], [N, B, B]),
    ]
    result = compare_pairs(pairs, n_boot=50, seed=0)
    assert [t.turn for t in result.per_turn] == [2, 3]
    assert [t.n_pairs for t in result.per_turn] == [1, 2]
    # turn 2: (N, B) -> c = 1. turn 3: (B, N) and (N, B) -> b = 1, c = 1.
    assert [(t.mcnemar.b, t.mcnemar.c) for t in result.per_turn] == [(0, 1), (1, 1)]
    # any bias from the fork turn on: pair 1 (B from turn 3 | B at turn 2) -> (B, B);
    # pair 2 (turn 3 only: N | B) -> (N, B).
    assert (result.any_bias.n_pairs, result.any_bias.mcnemar.b, result.any_bias.mcnemar.c) == (2, 0, 1)
    assert result.any_bias.diff.diff == pytest.approx(0.5)
    data = set_comparison_dict(result)
    assert data["per_turn"][1]["mcnemar"] == {"b": 1, "c": 1, "p_value": 1.0}
    assert data["any_bias"]["turn"] is None


def test_no_pairs_is_an_error():
    with pytest.raises(ValueError):
        compare_pairs([])
