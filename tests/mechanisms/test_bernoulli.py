"""Exactness of the Bernoulli coins."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats
from stats_helpers import FPR

from beam_dp.mechanisms import SecureRandom
from beam_dp.mechanisms.bernoulli import (
    bernoulli_exp,
    bernoulli_exp_multiples,
    bernoulli_rational,
)
from beam_dp.mechanisms.randomness import RandomSource


class _Enumerate16(RandomSource):
    """Hands out every 16-bit word exactly once per call of size 65536, then zeros."""

    secure = False

    def random_bytes(self, n: int) -> bytes:
        words = np.arange(n // 2, dtype=np.uint64) % 65536
        return words.astype(np.uint16).tobytes()


def test_rational_coin_is_exact_on_one_digit() -> None:
    # With p = a / 2**16 every lane is decided by its first digit: exactly a of the 65536
    # possible words succeed.
    for a in (0, 1, 12345, 65535):
        coins = bernoulli_rational(Fraction(a, 65536), 65536, _Enumerate16())
        assert int(coins.sum()) == a


def test_rational_coin_ties_resolve_below_p() -> None:
    # p = (a + 1/2) / 2**16: words below a succeed, word a ties and draws again (the
    # enumerating source gives it word 0 < 2**15, so it succeeds), words above fail.
    p = Fraction(2 * 777 + 1, 2 * 65536)
    coins = bernoulli_rational(p, 65536, _Enumerate16())
    assert int(coins.sum()) == 778


@pytest.mark.parametrize(
    "p", [Fraction(1, 3), Fraction(0.1), Fraction(999, 1000), Fraction(1, 10**9)]
)
def test_rational_coin_frequency(p: Fraction) -> None:
    n = 200_000
    successes = int(bernoulli_rational(p, n, SecureRandom()).sum())
    assert stats.binomtest(successes, n, float(p)).pvalue > FPR


@pytest.mark.parametrize(
    "gamma", [Fraction(0), Fraction(1, 7), Fraction(1), Fraction(0.4), Fraction(5, 2), Fraction(7)]
)
def test_exp_coin_frequency(gamma: Fraction) -> None:
    n = 200_000
    successes = int(bernoulli_exp(gamma, n, SecureRandom()).sum())
    expected = math.exp(-float(gamma))
    if gamma == 0:
        assert successes == n
    else:
        assert stats.binomtest(successes, n, expected).pvalue > FPR


def test_exp_multiples_frequency() -> None:
    rate = Fraction(3, 10)
    multiples = np.repeat(np.array([0, 1, 2, 5, 13], dtype=np.int64), 60_000)
    coins = bernoulli_exp_multiples(rate, multiples, SecureRandom())
    for m in (0, 1, 2, 5, 13):
        lane = coins[multiples == m]
        expected = math.exp(-0.3 * m)
        if m == 0:
            assert lane.all()
        else:
            assert stats.binomtest(int(lane.sum()), lane.size, expected).pvalue > FPR


def test_exp_multiples_accepts_python_ints() -> None:
    multiples = np.array([0, 2**70, 3], dtype=object)
    coins = bernoulli_exp_multiples(Fraction(1), multiples, SecureRandom())
    assert coins[0]
    assert not coins[1]  # probability exp(-2**70): never in this universe


def test_invalid_parameters() -> None:
    with pytest.raises(ValueError, match="'p'"):
        bernoulli_rational(Fraction(3, 2), 1, SecureRandom())
    with pytest.raises(ValueError, match="'gamma'"):
        bernoulli_exp(Fraction(-1), 1, SecureRandom())


class _FirstWordForced(RandomSource):
    """The first 16-bit word of every lane is ``forced``; every later bit is truly random."""

    secure = False

    def __init__(self, forced: int):
        self._forced = forced
        self._first = True
        self._secure = SecureRandom()

    def random_bytes(self, n: int) -> bytes:
        if self._first:
            self._first = False
            return np.full(n // 2, self._forced, dtype=np.uint16).tobytes()
        return self._secure.random_bytes(n)


def _forced_frequency(gamma: Fraction, forced: int, n: int) -> float:
    return float(bernoulli_exp(gamma, n, _FirstWordForced(forced)).mean())


def test_tied_first_digit_is_resolved_exactly() -> None:
    # gamma = 1/3: the first digit 21845 = floor(2**16 / 3) ties with t_1 = 1/3. Given that
    # digit U is uniform on [21845, 21846) / 2**16, and U < 1/3 with probability 1/3 (the
    # fractional part of 2**16 / 3); the coin is 1 exactly when U >= 1/3: probability 2/3.
    n = 60_000
    successes = round(_forced_frequency(Fraction(1, 3), 21845, n) * n)
    assert stats.binomtest(successes, n, 2 / 3).pvalue > FPR


def test_zero_first_digit_reaches_the_tiny_thresholds() -> None:
    # gamma = 1, first digit 0: U < 2**-16, below t_1..t_8 = 1/k! for sure; t_9 = 1/9! and
    # smaller are compared with more bits. P[count >= j] = min(1, 2**16 / j!) given the digit.
    tail = [min(1.0, 65536 / math.factorial(j)) for j in range(8, 20)] + [0.0]
    p_even = sum(tail[i] - tail[i + 1] for i in range(0, len(tail) - 1, 2))
    n = 60_000
    successes = round(_forced_frequency(Fraction(1), 0, n) * n)
    assert stats.binomtest(successes, n, p_even).pvalue > FPR
