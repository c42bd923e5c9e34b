"""Exactness of the Bernoulli coins."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from draw_helpers import ReadLog
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from stats_helpers import FPR

from beam_dp.mechanisms import SecureRandom
from beam_dp.mechanisms.bernoulli import (
    bernoulli_exp,
    bernoulli_exp_multiples,
    bernoulli_exp_multiples_walk,
    bernoulli_rational,
    geometric_exp,
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


MULTIPLES_COINS = [bernoulli_exp_multiples, bernoulli_exp_multiples_walk]


@pytest.mark.parametrize("coins_of", MULTIPLES_COINS)
def test_exp_multiples_frequency(coins_of: Any) -> None:
    rate = Fraction(3, 10)
    multiples = np.repeat(np.array([0, 1, 2, 5, 13], dtype=np.int64), 60_000)
    coins = coins_of(rate, multiples, SecureRandom())
    for m in (0, 1, 2, 5, 13):
        lane = coins[multiples == m]
        expected = math.exp(-0.3 * m)
        if m == 0:
            assert lane.all()
        else:
            assert stats.binomtest(int(lane.sum()), lane.size, expected).pvalue > FPR


@pytest.mark.parametrize("coins_of", MULTIPLES_COINS)
def test_exp_multiples_accepts_python_ints(coins_of: Any) -> None:
    multiples = np.array([0, 2**70, 3], dtype=object)
    coins = coins_of(Fraction(1), multiples, SecureRandom())
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


# --- the exact resort: a 64-bit prefix that decides nothing ------------------------------------

# The shapes callers pass: 1 (the whole part of gamma), fractional parts with small and with
# binary (float-derived) denominators, tiny and near-1 values, and c * 2**j of the multiples.
_GAMMAS = [
    Fraction(1),
    Fraction(1, 3),
    Fraction(0.4),
    Fraction(3, 5),
    Fraction(999_999, 1_000_000),
    Fraction(1, 10**6),
    Fraction(123_456_789, 2**40),
]


def _threshold(gamma: Fraction, k: int) -> Fraction:
    return gamma**k / math.factorial(k)


class _Words64(RandomSource):
    """64-bit words from a script: ``top`` fixes the first word's high 12 bits (the rest of it
    and every later word are random), or ``words`` gives the words themselves, in order."""

    secure = False

    def __init__(self, top: int | None = None, words: list[int] | None = None):
        self._top = top
        self._words = list(words or [])
        self._secure = SecureRandom()
        self.drawn = 0

    def random_bytes(self, n: int) -> bytes:
        assert n == 8, "the exact resort draws one 64-bit word at a time"
        self.drawn += 1
        if self._words:
            word = self._words.pop(0)
        else:
            word = int(self._secure.words64(1)[0])
            if self._top is not None and self.drawn == 1:
                word = (self._top << 52) | (word & ((1 << 52) - 1))
        return word.to_bytes(8, "little")


@pytest.mark.parametrize("gamma", _GAMMAS)
def test_zero_prefix_returns_with_the_exact_conditional_law(gamma: Fraction) -> None:
    # Given 64 zero bits, U is uniform on [0, 2**-64); with the next word's top 12 bits h it
    # is uniform on [h, h + 1) * 2**-76, so P[count >= j | h] = clamp(t_j 2**76 - h, 0, 1).
    # Over the 4096 values of h, #{h : count >= j} is therefore floor(x) or floor(x) + 1 for
    # x = min(t_j 2**76, 4096): only the h whose cell holds t_j is random. (The old code never
    # returned here: with low == 0 its inner loop never found a threshold below low.)
    from beam_dp.mechanisms.bernoulli import _count_below_exact

    counts = [_count_below_exact(gamma, 0, 64, _Words64(top=h)) for h in range(4096)]
    always = max(j for j in range(1, 200) if _threshold(gamma, j) >= Fraction(1, 2**64))
    assert min(counts) >= always  # every t_j >= 2**-64 is above U
    for j in range(always + 1, max(counts) + 2):
        x = min(_threshold(gamma, j) * 2**76, Fraction(4096))
        reached = sum(count >= j for count in counts)
        assert math.floor(x) <= reached <= math.floor(x) + 1, (j, reached, float(x))


@pytest.mark.parametrize("gamma", [Fraction(1), Fraction(1, 3), Fraction(1, 10**6)])
def test_zero_prefix_refines_until_the_threshold_is_decided(gamma: Fraction) -> None:
    # Put the first undecided threshold t_j inside the first refinement's cell: the function
    # must draw a second word, and that word alone decides which side of t_j U falls on.
    from beam_dp.mechanisms.bernoulli import _count_below_exact

    j = max(k for k in range(1, 200) if _threshold(gamma, k) >= Fraction(1, 2**64)) + 1
    cell = math.floor(_threshold(gamma, j) * 2**128)  # t_j lies inside [cell, cell + 1) 2**-128
    below = _Words64(words=[cell, 0])  # U just above cell * 2**-128 < t_j
    above = _Words64(words=[cell, 2**64 - 1])  # U just below (cell + 1) * 2**-128 > t_j
    assert _count_below_exact(gamma, 0, 64, below) >= j and below.drawn == 2
    assert _count_below_exact(gamma, 0, 64, above) == j - 1 and above.drawn == 2
    # A cell with no threshold inside is decided by one word.
    quiet = _Words64(words=[cell + 2**40])
    assert _count_below_exact(gamma, 0, 64, quiet) == j - 1 and quiet.drawn == 1


class _ZeroPrefix(RandomSource):
    """The first four 16-bit words of every lane are 0 (a 64-bit prefix of zeros)."""

    secure = False

    def __init__(self) -> None:
        self._zero_calls = 4
        self._secure = SecureRandom()

    def random_bytes(self, n: int) -> bytes:
        if self._zero_calls:
            self._zero_calls -= 1
            return bytes(n)
        return self._secure.random_bytes(n)


@pytest.mark.parametrize("gamma", [Fraction(1), Fraction(1, 3)])
def test_coins_with_a_zero_64_bit_prefix_follow_the_exact_law(gamma: Fraction) -> None:
    # Through the caller: every lane sees 64 zero bits, reaches the exact resort and returns.
    # Given U < 2**-64 the coin is [count even] with P[count >= j] = min(1, t_j 2**64).
    tail = [min(Fraction(1), _threshold(gamma, j) * 2**64) for j in range(0, 60)] + [Fraction(0)]
    p_even = float(sum(tail[i] - tail[i + 1] for i in range(0, 60, 2)))
    n = 6_000
    successes = int(bernoulli_exp(gamma, n, _ZeroPrefix()).sum())
    assert stats.binomtest(successes, n, p_even).pvalue > FPR


def test_exact_resort_refuses_gamma_outside_its_range() -> None:
    from beam_dp.mechanisms.bernoulli import _count_below_exact

    for gamma in (Fraction(0), Fraction(3, 2)):
        with pytest.raises(ValueError, match="'gamma'"):
            _count_below_exact(gamma, 0, 64, SecureRandom())


@pytest.mark.parametrize(
    "c", [Fraction(1, 50), Fraction(1, 7), Fraction(3, 10), Fraction(1), Fraction(5, 2)]
)
def test_geometric_exp_has_the_exponential_tail(c: Fraction) -> None:
    # P(G >= g) = exp(-c g), checked at a few g (t = ceil(1/(4c)) is 13, 2, 1, 1 and 1: the
    # proposals' loop runs for the first two, the V coins for all).
    n = 120_000
    draws = geometric_exp(c, n, SecureRandom())
    assert draws.dtype == np.int64 and int(draws.min()) >= 0
    for g in (1, 2, 3, 8, 40):
        expected = math.exp(-float(c) * g)
        assert stats.binomtest(int((draws >= g).sum()), n, expected).pvalue > FPR


def test_geometric_exp_with_a_rate_below_two_to_the_minus_62_uses_python_ints() -> None:
    c = Fraction(1, 2**70)
    draws = geometric_exp(c, 5, SecureRandom())
    assert draws.dtype == object and all(isinstance(g, int) and g >= 0 for g in draws)
    # G >= 2**70 with probability exp(-1): the draws are not all below 2**62 (which would
    # mean a truncated proposal); checked over enough lanes to be certain in practice.
    many = geometric_exp(c, 200, SecureRandom())
    assert max(int(g) for g in many) > 2**62


MULTIPLE_LISTS = st.integers(1, 60).flatmap(
    lambda n: st.tuples(
        st.lists(st.integers(0, 2**40), min_size=n, max_size=n),
        st.lists(st.integers(0, 2**40), min_size=n, max_size=n),
    )
)


@settings(deadline=None, max_examples=80)
@given(
    pair=MULTIPLE_LISTS,
    c=st.fractions(min_value=Fraction(1, 1000), max_value=Fraction(20), max_denominator=1000),
    seed=st.integers(0, 2**32 - 1),
)
def test_exp_multiples_read_a_stream_that_does_not_depend_on_the_multiples(
    pair: tuple[list[int], list[int]], c: Fraction, seed: int
) -> None:
    # Given the seed, every read's size is a function of c, the number of lanes and bits
    # already read: any two multiples of the same length read the same stream.
    logs = []
    for multiples in pair:
        source = ReadLog(seed)
        bernoulli_exp_multiples(c, np.array(multiples, dtype=np.int64), source)
        logs.append(source.reads)
    assert logs[0] == logs[1]
    as_objects = ReadLog(seed)
    bernoulli_exp_multiples(c, np.array(pair[0], dtype=object), as_objects)
    assert as_objects.reads == logs[0]


def test_the_walk_reads_a_stream_that_depends_on_the_multiples() -> None:
    # The property above is not vacuous: the coins by bits draw nothing for a zero multiple.
    logs = []
    for multiples in ([0] * 50, [1000] * 50):
        source = ReadLog(3)
        bernoulli_exp_multiples_walk(Fraction(1, 2), np.array(multiples, dtype=np.int64), source)
        logs.append(source.reads)
    assert logs[0] != logs[1]


def test_exp_multiples_with_rate_zero_succeed_without_reading() -> None:
    source = ReadLog(0)
    coins = bernoulli_exp_multiples(Fraction(0), np.array([0, 5, 2**40]), source)
    assert coins.all() and source.reads == []
