"""Why the joint split is not merged: its rejection sampler's acceptance probability on tied data.

``python benchmarks/joint_split_stall.py`` prints P(accept a round) = Z_U / (Z_1 Z_2) for
100 values at 0, 800 at 5 and 100 at 10, quantiles (0.3, 0.7), epsilon 1 and 0.1 (floats;
a diagnostic, not a sampler).
"""

import math
from fractions import Fraction

import numpy as np

from beam_dp.summaries.histogram import Grid
from beam_dp.summaries.quantiles.joint import pair_scores, pair_sensitivity
from beam_dp.summaries.quantiles.recursive import _Branch

grid = Grid.uniform(0.0, 10.0, 11)
values = np.array([0.0] * 100 + [5.0] * 800 + [10.0] * 100)
alphas = (Fraction(3, 10), Fraction(7, 10))
less, greater, scale = _Branch(0, grid.num_slots - 1).less_greater(grid.histogram(values).counts())
first, second, common = pair_scores(less, greater, alphas)
for epsilon in (1.0, 0.1):
    c = epsilon / (2 * float(pair_sensitivity(alphas, "add_remove", 1)) * common * scale)
    a, b = np.abs(first).astype(float), np.abs(second).astype(float)
    z1, z2 = np.exp(-c * (a - a.min())).sum(), np.exp(-c * (b - b.min())).sum()
    zu = sum(
        math.exp(-c * (a[i] + b[j] + abs(int(second[j]) - int(first[i])) - a.min() - b.min()))
        for i in range(len(a))
        for j in range(i, len(a))
    )
    print(f"epsilon {epsilon}: P(accept a round) = {zu / (z1 * z2):.3g}")
