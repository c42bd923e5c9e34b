"""The joint pair sampler's public work (docs/timing.md, the joint pair): the same requests for
random bits on any scores of one length, a round acceptance above the bound that sizes its
padding, exact brackets for its coins, and its exact law from a fixed seed."""

from __future__ import annotations

import math
import random
import warnings
from decimal import Decimal, getcontext
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pytest
from random_logs import WorkLog
from stats_helpers import chi_square_pvalue

from beam_dp.mechanisms.dyadic import (
    CLAMP,
    exp_times_power_of_two_bounds,
    fine_envelope_levels,
    fine_level,
)
from beam_dp.mechanisms.randomness import InsecureSeededRandom
from beam_dp.summaries.quantiles.joint import (
    PAIR_ROUNDS,
    _draw_pair,
    _pair_envelope,
    _point_envelope,
    pair_scores,
    select_on_errors,
    select_pair,
)

ALPHAS = (Fraction(1, 4), Fraction(3, 4))


def seeded(seed: int) -> InsecureSeededRandom:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return InsecureSeededRandom(seed)


def scores_of(counts: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], ...]:
    """The pair's scores on a histogram (rank-range scores, as a pair node without children)."""
    less = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    greater = int(counts.sum()) - less - counts
    first, second, _ = pair_scores(less, counts.astype(np.int64), greater, ALPHAS)
    return first, second


D = 48
#: Histograms of one size that lead the old sampler to different rounds and requests: spread
#: values, one tie block, two blocks, an empty branch, and a neighbour of the first.
HISTOGRAMS = {
    "uniform": np.random.default_rng(1).integers(0, 30, D),
    "uniform plus one": np.random.default_rng(1).integers(0, 30, D) + (np.arange(D) == 7),
    "one tie block": 500 * (np.arange(D) == 20),
    "two blocks": 300 * ((np.arange(D) == 3) | (np.arange(D) == 40)),
    "empty": np.zeros(D, dtype=np.int64),
    "heavy ends": np.where((np.arange(D) < 4) | (np.arange(D) > 43), 1000, 1),
}


@pytest.mark.parametrize("rate", [Fraction(1, 40), Fraction(1, 3), Fraction(7, 2)])
def test_select_pair_makes_the_same_requests_on_any_scores_of_one_size(rate: Fraction) -> None:
    # The old sampler (rounds until one accepts; randbelow of envelope totals, family totals,
    # counts and partner ranges; coins refined by their values) logged different requests here.
    for seed in range(3):
        logs = {}
        for name, counts in HISTOGRAMS.items():
            first, second = scores_of(np.asarray(counts, dtype=np.int64))
            source = WorkLog(seed)
            select_pair(first, second, rate, source)
            logs[name] = source.log
        reference = logs["uniform"]
        assert reference[0] == ("words64", PAIR_ROUNDS * 9)
        assert all(log == reference for log in logs.values()), seed


def _round_acceptance(
    first: npt.NDArray[np.int64], second: npt.NDArray[np.int64], rate: Fraction
) -> float:
    """A round's exact acceptance probability (in floats): the target's mass over the sorted
    pairs (each accepted pair keeps ``exp(-2 rate (R - R_0))`` of its envelope weight, which
    sums to that) over the envelope's mass."""
    envelope = _pair_envelope(first, second, rate)
    least = min(sum(f.floor for f in piece.families) for piece in envelope.pieces)
    rate2 = float(2 * rate)
    target = 0.0
    for i in range(first.size):
        for j in range(i, first.size):
            a, b = int(first[i]), int(second[j])
            spread = max(0, a, b) - min(0, a, b)
            target += math.exp(-rate2 * (spread - least))
    return target / float(Fraction(envelope.total, (16 << (CLAMP + 1)) ** 3))


def test_a_round_accepts_above_the_bound_that_sizes_the_padding() -> None:
    # The bound of _pair_rounds' docstring, measured on every histogram above and on random
    # ones at several rates (the smallest acceptance seen is reported by the assertion).
    bound = 256 / 729 * (1 - 2.0**-26)
    rng = np.random.default_rng(3)
    cases = [np.asarray(c, dtype=np.int64) for c in HISTOGRAMS.values()]
    cases += [
        rng.integers(0, int(rng.integers(1, 200)), int(rng.integers(2, 30))) for _ in range(40)
    ]
    lowest = 1.0
    for counts in cases:
        first, second = scores_of(counts)
        for rate in (Fraction(1, 1000), Fraction(1, 7), Fraction(2), Fraction(50)):
            lowest = min(lowest, _round_acceptance(first, second, rate))
    assert lowest >= bound, lowest
    # ... and the padding it sizes: every round of a draw rejected with probability < e**-32.
    assert PAIR_ROUNDS * math.log1p(-bound) < -32


@pytest.mark.parametrize("bits", [64, 128])
def test_the_coin_brackets_hold_exp_minus_y_times_two_to_the_exponent(bits: int) -> None:
    getcontext().prec = 160
    rng = random.Random(11)
    for k in range(1500):
        y = Fraction(rng.randint(0, 10 ** (k % 8 + 1)), rng.randint(1, 5000))
        sigma = fine_level(int(fine_envelope_levels(np.array([float(y)]))[0]))[1]
        if k % 3 == 0:  # any exponent below y / ln 2 is allowed
            sigma = rng.randint(0, sigma)
        low, high = exp_times_power_of_two_bounds(y, sigma, bits)
        exact = (-(Decimal(y.numerator) / Decimal(y.denominator))).exp() * Decimal(2) ** (
            sigma + bits
        )
        assert low <= exact <= high, (y, sigma)
        assert high - low <= 2
    with pytest.raises(ValueError, match="sigma"):
        exp_times_power_of_two_bounds(Fraction(1), 2, 64)  # 2 ln 2 > 1


def test_fine_levels_bound_exp_minus_y_within_nine_eighths() -> None:
    # Every weight is at least exp(-y) (a coin is a probability) and, below the cap, less
    # than 9/8 (1 + 2**-28) times it (the bound behind PAIR_ROUNDS); levels rise with y.
    getcontext().prec = 80
    rng = random.Random(5)
    rate = Fraction(3, 17)
    offsets = sorted({0, 1, 2, 3, *(rng.randint(0, 10 ** rng.randint(1, 5)) for _ in range(3000))})
    levels = fine_envelope_levels(float(rate) * np.array(offsets, dtype=np.float64))
    assert np.all(np.diff(levels) >= 0)
    for offset, level in zip(offsets, levels.tolist(), strict=True):
        y = rate * offset
        target = (-(Decimal(y.numerator) / Decimal(y.denominator))).exp()
        k, s = fine_level(level)
        weight = Decimal(k) / 16 / Decimal(2) ** s
        assert target <= weight, offset
        if float(y) / math.log(2) < CLAMP + 1.4:  # below the cap
            assert weight < Decimal(9) / 8 * (1 + Decimal(2) ** -28) * target, offset


def _exact_law(
    first: npt.NDArray[np.int64], second: npt.NDArray[np.int64], rate: Fraction
) -> dict[tuple[int, int], float]:
    utility = {
        (i, j): abs(int(first[i])) + abs(int(second[j])) + abs(int(second[j]) - int(first[i]))
        for i in range(first.size)
        for j in range(i, first.size)
    }
    least = min(utility.values())
    weights = {p: math.exp(-float(rate) * (u - least)) for p, u in utility.items()}
    total = sum(weights.values())
    return {p: w / total for p, w in weights.items()}


@pytest.mark.parametrize("rounds", [1, 3, pytest.param(PAIR_ROUNDS, marks=pytest.mark.slow)])
def test_the_padded_sampler_follows_the_exact_law(rounds: int) -> None:
    # Fixed seeds: a chi-square test of 3 000 draws per case against the exact probabilities,
    # on small grids (spread values, a tie block, an empty branch), at 1, 3 and the production
    # number of padded rounds (1: every rejected round starts a further block).
    draws = 3_000 if rounds < PAIR_ROUNDS else 600
    cases = [
        (np.array([3, 0, 5, 1, 2, 4]), Fraction(1, 3)),
        (np.array([0, 9, 0, 0, 1]), Fraction(1, 2)),
        (np.array([0, 0, 0, 0]), Fraction(1)),
        (np.array([2, 2, 2, 2, 2, 2, 2]), Fraction(3, 5)),
    ]
    for seed, (counts, rate) in enumerate(cases):
        first, second = scores_of(counts.astype(np.int64))
        law = _exact_law(first, second, rate)
        pairs = sorted(law)
        position = {pair: k for k, pair in enumerate(pairs)}
        envelope = _pair_envelope(first, second, rate)
        source = seeded(100 + seed)
        observed = np.zeros(len(pairs), dtype=np.int64)
        for _ in range(draws):
            observed[position[_draw_pair(envelope, source, rounds)[:2]]] += 1
        expected = np.array([law[pair] for pair in pairs])
        assert chi_square_pvalue(observed, expected) > 1e-3, (seed, rounds)


def _exact_point_law(errors: npt.NDArray[np.int64], rate: Fraction) -> npt.NDArray[np.float64]:
    weights = np.array([math.exp(-float(rate) * abs(int(e))) for e in errors])
    return weights / weights.sum()


@pytest.mark.parametrize("rounds", [1, 3, pytest.param(PAIR_ROUNDS, marks=pytest.mark.slow)])
def test_the_single_sampler_follows_the_exact_law(rounds: int) -> None:
    # select_on_errors (single nodes on fine grids): fixed seeds, 3 000 draws per case against
    # exp(-rate |e|) normalised: errors on both sides, ties at 0, one side only, one candidate.
    cases = [
        (np.array([-5, -4, -4, -3, 1, 4, 5]), Fraction(1)),
        (np.array([-3, -3, -2, 0, 0, 2, 3, 5]), Fraction(1, 2)),
        (np.array([-6, -2, -1]), Fraction(5, 2)),
        (np.array([1, 2, 3, 9]), Fraction(4, 3)),
        (np.array([7]), Fraction(1)),
    ]
    for seed, (errors, rate) in enumerate(cases):
        errors = errors.astype(np.int64)
        envelope = _point_envelope(errors, rate)
        source = seeded(200 + seed)
        observed = np.zeros(errors.size, dtype=np.int64)
        for _ in range(3_000 if rounds < PAIR_ROUNDS else 600):
            observed[_draw_pair(envelope, source, rounds)[0]] += 1
        assert chi_square_pvalue(observed, _exact_point_law(errors, rate)) > 1e-3, seed


@pytest.mark.parametrize("rate", [Fraction(1, 40), Fraction(1, 3), Fraction(7, 2)])
def test_the_single_sampler_makes_the_same_requests_on_any_errors_of_one_size(
    rate: Fraction,
) -> None:
    # Its work is a function of the number of candidates: PAIR_ROUNDS rounds of 9 words,
    # on errors from spread values, a tie block, an empty branch, one side only.
    rng = np.random.default_rng(8)
    errors = [
        np.sort(rng.integers(-40, 40, D)),
        np.sort(rng.integers(-40, 40, D)) + 1,
        np.where(np.arange(D) < 20, -500, np.where(np.arange(D) > 20, 500, 0)),
        np.zeros(D, dtype=np.int64),
        np.arange(D) + 3,
        -np.arange(D)[::-1] * 1000,
    ]
    for seed in range(3):
        logs = []
        for e in errors:
            source = WorkLog(seed)
            select_on_errors(e.astype(np.int64), rate, source)
            logs.append(source.log)
        assert logs[0][0] == ("words64", PAIR_ROUNDS * 9)
        assert all(log == logs[0] for log in logs), seed


def test_the_single_sampler_refuses_unsorted_errors() -> None:
    with pytest.raises(ValueError, match="non-decreasing"):
        select_on_errors(np.array([1, 0]), Fraction(1), seeded(1))
    with pytest.raises(ValueError, match="non-empty"):
        select_on_errors(np.array([], dtype=np.int64), Fraction(1), seeded(1))
