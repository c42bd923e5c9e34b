"""Statistical helpers shared by the tests: goodness of fit and privacy audits.

Every test built on these has a false-positive rate of at most ``FPR`` (1e-6): it fails by
chance less than once in a million runs, so a failure is a bug, not bad luck.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import numpy.typing as npt
from scipy import stats

FPR = 1e-6


def chi_square_pvalue(
    counts: npt.NDArray[np.int64], probabilities: npt.NDArray[np.float64], min_expected: float = 5.0
) -> float:
    """Pearson chi-square p-value of ``counts`` against ``probabilities``.

    Cells whose expected count is below ``min_expected`` are pooled into one cell, and the
    next smallest cells join that pool until its own expected count reaches ``min_expected``
    (or every cell is in it), so that the chi-square approximation holds for every cell. A
    pool left with a tiny expected count (say 0.005) turned one rare observation into a
    statistic of 200 and a p-value far below ``FPR``: a false failure about once in 200 runs
    per such test (seen in ``tests/summaries/quantiles/test_joint.py``). An outcome of
    probability 0 that occurs gives p-value 0 (pooling must not hide an impossible draw).
    """
    impossible = np.asarray(probabilities) <= 0
    if np.any(counts[impossible] > 0):
        return 0.0
    counts, probabilities = counts[~impossible], np.asarray(probabilities)[~impossible]
    total = int(counts.sum())
    expected = probabilities * total
    order = np.argsort(expected, kind="stable")
    pooled = int(np.count_nonzero(expected < min_expected))
    if pooled:
        running = np.cumsum(expected[order])
        while pooled < order.size and running[pooled - 1] < min_expected:
            pooled += 1
    in_pool = np.zeros(expected.size, dtype=bool)
    in_pool[order[:pooled]] = True
    obs = list(counts[~in_pool])
    exp = list(expected[~in_pool])
    if pooled:
        obs.append(counts[in_pool].sum())
        exp.append(expected[in_pool].sum())
    obs_arr = np.asarray(obs, dtype=float)
    exp_arr = np.asarray(exp, dtype=float)
    if obs_arr.size < 2:
        return 1.0
    statistic = float(((obs_arr - exp_arr) ** 2 / exp_arr).sum())
    return float(stats.chi2.sf(statistic, df=obs_arr.size - 1))


def draw_counts(
    sampler: Callable[[], int], num_candidates: int, num_samples: int
) -> npt.NDArray[np.int64]:
    counts = np.zeros(num_candidates, dtype=np.int64)
    for _ in range(num_samples):
        counts[sampler()] += 1
    return counts


def clopper_pearson(successes: int, trials: int, alpha: float) -> tuple[float, float]:
    """Two-sided Clopper-Pearson interval at level 1 - alpha."""
    lower = (
        0.0
        if successes == 0
        else float(stats.beta.ppf(alpha / 2, successes, trials - successes + 1))
    )
    upper = (
        1.0
        if successes == trials
        else float(stats.beta.ppf(1 - alpha / 2, successes + 1, trials - successes))
    )
    return lower, upper


def audited_epsilon_lower_bound(
    hits_x: int, hits_neighbour: int, trials: int, alpha: float = FPR
) -> float:
    """A lower confidence bound on ln(P[E | x] / P[E | x']) from ``trials`` runs on each.

    With probability at least 1 - alpha the true log ratio is above the returned value, so a
    return value above epsilon proves (up to alpha) that the sampler is not epsilon-DP.
    """
    lower_x, _ = clopper_pearson(hits_x, trials, alpha / 2)
    _, upper_neighbour = clopper_pearson(hits_neighbour, trials, alpha / 2)
    if lower_x <= 0.0:
        return -math.inf
    return math.log(lower_x / upper_neighbour)
