"""The tied case that stalled the first joint sampler, and what the envelope sampler needs there.

``PYTHONPATH=. python benchmarks/joint_split_stall.py`` prints, for 100 values at 0, 800 at 5
and 100 at 10, quantiles (0.3, 0.7), on grids of 11 and 10 001 points at epsilon 1 and 0.1:

* the first sampler's acceptance per round, ``Z_U / (Z_1 Z_2)`` (two independent exponential
  mechanisms accepted when sorted by a coupling coin), computed in floats as a diagnostic;
* the rounds and time per draw of :func:`beam_dp.summaries.quantiles.joint.select_pair`.
"""

import math
import time
from fractions import Fraction

import numpy as np

from beam_dp.mechanisms import SecureRandom
from beam_dp.summaries.histogram import Grid
from beam_dp.summaries.quantiles.joint import _pair_rounds, pair_scores, pair_sensitivity
from beam_dp.summaries.quantiles.recursive import _Branch, _Lattice

values = np.array([0.0] * 100 + [5.0] * 800 + [10.0] * 100)
alphas = (Fraction(3, 10), Fraction(7, 10))
source = SecureRandom()
for points in (11, 10_001):
    grid = Grid.uniform(0.0, 10.0, points)
    counts = grid.histogram(values).counts()
    _, low, high, n = _Branch().ranks(_Lattice(counts, 1))
    first, second, common = pair_scores(low, high - low, n - high, alphas)
    scale = 1
    for epsilon in (Fraction(1), Fraction(1, 10)):
        rate = epsilon / (2 * pair_sensitivity(alphas, "add_remove", 1) * common * scale)
        line = f"grid {points:>6,}, epsilon {float(epsilon)}: "
        if points <= 11:
            c = float(rate)
            a, b = np.abs(first).astype(float), np.abs(second).astype(float)
            z1, z2 = np.exp(-c * (a - a.min())).sum(), np.exp(-c * (b - b.min())).sum()
            zu = sum(
                math.exp(
                    -c * (a[i] + b[j] + abs(int(second[j]) - int(first[i])) - a.min() - b.min())
                )
                for i in range(len(a))
                for j in range(i, len(a))
            )
            line += f"first sampler accepts a round with p = {zu / (z1 * z2):.3g}; "
        start = time.perf_counter()
        rounds = [_pair_rounds(first, second, rate, source)[2] for _ in range(200)]
        took = (time.perf_counter() - start) / 200
        line += f"envelope sampler: {np.mean(rounds):.2f} rounds, {took * 1e3:.1f} ms per draw"
        print(line)
