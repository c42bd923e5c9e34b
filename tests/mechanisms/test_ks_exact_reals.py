"""The exact building blocks of the KS sampler: bounds on exponentials, index draws, geometrics."""

from __future__ import annotations

import decimal
import math
from fractions import Fraction

import numpy as np
import pytest
from stats_helpers import FPR, chi_square_pvalue

from beam_dp.mechanisms import SecureRandom
from beam_dp.mechanisms.cdf.exact_reals import (
    IndexSampler,
    exp_neg_bounds,
    geometric,
    one_minus_exp_neg_bounds,
    randbelow,
    truncated_geometric,
)


def _reference_exp_neg(x: Fraction) -> Fraction:
    """exp(-x) to 90 significant digits (decimal's exp is correctly rounded)."""
    with decimal.localcontext() as context:
        context.prec = 90
        value = (-(decimal.Decimal(x.numerator) / decimal.Decimal(x.denominator))).exp()
    return Fraction(value)


@pytest.mark.parametrize(
    "x",
    [
        Fraction(0),
        Fraction(1, 10**12),
        Fraction(1, 3),
        Fraction(1, 2),
        Fraction(1),
        Fraction(7, 3),
        Fraction(50),
        Fraction(100_012_3, 1000),
        Fraction(0.005) * 123_457,
    ],
)
@pytest.mark.parametrize("bits", [64, 160])
def test_exp_neg_bounds_bracket_the_value_tightly(x: Fraction, bits: int) -> None:
    lo, hi = exp_neg_bounds(x, bits)
    reference = _reference_exp_neg(x)
    tolerance = reference / 10**85  # the reference's own rounding
    assert lo - tolerance <= reference <= hi + tolerance
    assert (hi - lo) / lo <= Fraction(1, 1 << (bits - 4))


@pytest.mark.parametrize(
    "y",
    [
        Fraction(1, 10**15),
        Fraction(1, 1000),
        Fraction(1, 4),
        Fraction(1, 2),
        Fraction(3),
        Fraction(0.005),
    ],
)
@pytest.mark.parametrize("bits", [64, 160])
def test_one_minus_exp_neg_bounds_keep_relative_precision(y: Fraction, bits: int) -> None:
    lo, hi = one_minus_exp_neg_bounds(y, bits)
    reference = 1 - _reference_exp_neg(y)
    tolerance = Fraction(1, 10**85)
    assert lo - tolerance <= reference <= hi + tolerance
    assert (hi - lo) / lo <= Fraction(1, 1 << (bits - 4))


def test_bounds_reject_bad_arguments() -> None:
    with pytest.raises(ValueError, match="'x'"):
        exp_neg_bounds(Fraction(-1), 64)
    with pytest.raises(ValueError, match="'y'"):
        one_minus_exp_neg_bounds(Fraction(0), 64)


# Weights A_i * exp(-x_i): big integers against exponentials, as the KS blocks have them.
COUNTS = [1, 10**30, 3, 7 * 10**28, 2]
EXPONENTS = [Fraction(0), Fraction(70), Fraction(5, 2), Fraction(65), Fraction(1, 7)]


def _exact_weights(bits: int) -> list[tuple[Fraction, Fraction]]:
    out = []
    for count, x in zip(COUNTS, EXPONENTS, strict=True):
        lo, hi = exp_neg_bounds(x, bits)
        out.append((count * lo, count * hi))
    return out


def _coarse_first_round(bits: int) -> list[tuple[Fraction, Fraction]]:
    """Valid but very loose bounds in the first round: most draws need a second round."""
    bounds = _exact_weights(bits)
    if bits == 64:
        return [(lo / 3, hi * 3) for lo, hi in bounds]
    return bounds


def _index_probabilities() -> np.ndarray:
    logs = np.array([math.log(a) - float(x) for a, x in zip(COUNTS, EXPONENTS, strict=True)])
    weights = np.exp(logs - logs.max())
    return weights / weights.sum()


@pytest.mark.parametrize("bounds_at", [_exact_weights, _coarse_first_round])
def test_index_sampler_draws_the_exact_law(bounds_at) -> None:  # type: ignore[no-untyped-def]
    sampler = IndexSampler(bounds_at)
    source = SecureRandom()
    counts = np.zeros(len(COUNTS), dtype=np.int64)
    for _ in range(20_000):
        counts[sampler.sample(source)] += 1
    assert chi_square_pvalue(counts, _index_probabilities()) > FPR
    if bounds_at is _coarse_first_round:
        assert len(sampler._rounds) >= 2  # the refinement path ran


def test_index_sampler_refuses_all_zero_weights() -> None:
    sampler = IndexSampler(lambda bits: [(Fraction(0), Fraction(0))] * 3)
    with pytest.raises(ValueError, match="weights"):
        sampler.sample(SecureRandom())


def _geometric_probabilities(gamma: Fraction, width: int) -> np.ndarray:
    weights = np.exp(-float(gamma) * np.arange(width))
    return weights / weights.sum()


@pytest.mark.parametrize(
    ("gamma", "width"),
    [
        (Fraction(1, 3), 4),  # narrow: uniform proposals kept by a coin
        (Fraction(1, 3), 40),  # wide: untruncated geometric, redrawn above the width
        (Fraction(1, 200), 5),
        (Fraction(1, 200), 1_000),
        (Fraction(5, 2), 3),
    ],
)
def test_truncated_geometric_has_the_exact_law(gamma: Fraction, width: int) -> None:
    source = SecureRandom()
    draws = [truncated_geometric(gamma, width, source) for _ in range(3_000)]
    assert min(draws) >= 0 and max(draws) < width
    counts = np.bincount(draws, minlength=width)
    assert chi_square_pvalue(counts, _geometric_probabilities(gamma, width)) > FPR


@pytest.mark.parametrize("gamma", [Fraction(1, 3), Fraction(1, 50), Fraction(3)])
def test_geometric_has_the_exact_law(gamma: Fraction) -> None:
    source = SecureRandom()
    draws = np.array([geometric(gamma, source) for _ in range(3_000)])
    cap = int(30 / float(gamma))  # beyond this the mass is below e**-30
    assert draws.max() < cap
    expected = np.exp(-float(gamma) * np.arange(cap)) * -math.expm1(-float(gamma))
    assert chi_square_pvalue(np.bincount(draws, minlength=cap), expected) > FPR
    assert truncated_geometric(gamma, None, source) >= 0


def test_geometric_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError, match="'gamma'"):
        geometric(Fraction(0), SecureRandom())
    with pytest.raises(ValueError, match="'width'"):
        truncated_geometric(Fraction(1), 0, SecureRandom())


@pytest.mark.parametrize("bound", [1, 2, 7, 1000, (1 << 70) + 3])
def test_randbelow_is_uniform(bound: int) -> None:
    source = SecureRandom()
    draws = [randbelow(bound, source) for _ in range(5_000)]
    assert all(0 <= d < bound for d in draws)
    cells = min(bound, 10)  # big bounds: 10 equal-probability ranges (bound % 10 is tiny)
    counts = np.bincount([d * cells // bound for d in draws], minlength=cells)
    assert chi_square_pvalue(counts, np.full(cells, 1 / cells)) > FPR
    with pytest.raises(ValueError, match="'bound'"):
        randbelow(0, source)
