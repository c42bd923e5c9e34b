"""EXPERIMENT (branch experiment/joint-split, not on main): two quantiles chosen jointly.

Utility: for ``alpha_1 < alpha_2`` and grid points ``r_1 <= r_2``, with the signed
single-quantile scores ``e_j = (1 - alpha_j) L(r_j) - alpha_j G(r_j)``,
``U = |e_1| + |e_2| + lambda |e_2 - e_1|`` (``lambda = COUPLING``; 1 is JointExp's utility,
the total variation of the path ``0, e_1, e_2, 0``). Add/remove sensitivity: the largest of
``|d_1| + |d_2| + lambda |d_2 - d_1|`` over the six move patterns of one value
(``2 (1 - min gap)`` for lambda = 1); replace: 2 per value.

Sampling: both points from the exact exponential mechanism on ``|e_1|`` and ``|e_2|``,
accepted when sorted by an exact Bernoulli(exp(-c lambda |e_2 - e_1|)) coin. Exact, ends with
probability 1, **but a round accepts with probability Z_U / (Z_1 Z_2), which is astronomically
small when both quantiles fall in one block of tied values** (then ``e_1 > 0 > e_2`` at the
tied point and the slack ``|e_2 - e_1|`` is a large fraction of n). This is why the split was
not merged: see benchmarks/RESULTS.md, "Against the original JointExp, per range of m".
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from beam_dp._validation import Relation
from beam_dp.mechanisms import RandomSource
from beam_dp.mechanisms.bernoulli import bernoulli_exp_multiples
from beam_dp.mechanisms.selection import exponential_gaps
from beam_dp.scores._exact import check_fits_int64
from beam_dp.summaries.quantiles.parameters import selection_loss

__all__ = ["pair_loss", "pair_scores", "pair_sensitivity", "select_pair"]

IntArray = npt.NDArray[np.int64]

#: The weight ``lambda`` of the middle term.
COUPLING = Fraction(1)


def pair_sensitivity(
    alphas: tuple[Fraction, Fraction], relation: Relation, k: Fraction | int
) -> Fraction:
    low, high = alphas
    if not 0 < low < high < 1:
        raise ValueError(f"'alphas' must satisfy 0 < alpha_1 < alpha_2 < 1; received {alphas}")
    if relation == "replace":
        return 2 * Fraction(k)
    moves = [
        (h1 - low, h2 - high)
        for h1, h2 in ((0, 0), (0, high), (0, 1), (low, high), (low, 1), (1, 1))
    ]
    largest = max(abs(d1) + abs(d2) + COUPLING * abs(d2 - d1) for d1, d2 in moves)
    return Fraction(largest) * Fraction(k)


def pair_loss(
    num_candidates: int, epsilon: Fraction, sensitivity: Fraction, confidence: float
) -> float:
    return selection_loss(num_candidates**2, epsilon, sensitivity, confidence) / 2


def pair_scores(
    less: IntArray, greater: IntArray, alphas: tuple[Fraction, Fraction]
) -> tuple[IntArray, IntArray, int]:
    low, high = alphas
    common = math.lcm(low.denominator, high.denominator)
    largest = max(int(less.max(initial=0)), int(greater.max(initial=0)))
    check_fits_int64(4 * common * largest, "joint quantile scores")
    signed = []
    for alpha in alphas:
        above = int(alpha * common)
        signed.append((common - above) * less - above * greater)
    return signed[0], signed[1], common


def select_pair(
    first: IntArray, second: IntArray, rate: Fraction, source: RandomSource
) -> tuple[int, int]:
    if first.shape != second.shape or first.size == 0:
        raise ValueError("'first' and 'second' must be non-empty and of one length")
    distance = [np.abs(first), np.abs(second)]
    gaps = [d - d.min() for d in distance]
    while True:
        i = exponential_gaps(gaps[0], rate, source)
        j = exponential_gaps(gaps[1], rate, source)
        if i > j:
            continue
        middle = np.array([abs(int(second[j]) - int(first[i]))], dtype=np.int64)
        if bernoulli_exp_multiples(rate * COUPLING, middle, source)[0]:
            return i, j
