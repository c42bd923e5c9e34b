"""The exact power of a privacy audit: how likely a sampler that leaks is to escape it.

:func:`stats_helpers.audited_epsilon_lower_bound` compares ``hits_x ~ Binomial(trials, p)`` with
``hits_neighbour ~ Binomial(trials, q)``. For a sampler whose event has those exact
probabilities, the chance that the audit's lower bound stays ``<= epsilon`` (the leak goes
unseen) is a sum over both hit counts; tests use it to justify their number of trials.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats
from stats_helpers import FPR


def audit_escape_probability(
    p: float, q: float, trials: int, epsilon: float, alpha: float = FPR
) -> float:
    """P[audited_epsilon_lower_bound(X, Y, trials, alpha) <= epsilon], X ~ Bin(trials, p) and
    Y ~ Bin(trials, q) independent, exactly up to floating-point rounding.

    For each ``x`` the bound exceeds ``epsilon`` exactly when the Clopper-Pearson upper bound
    of ``y`` is below ``lower(x) e**-epsilon`` (the upper bounds increase with ``y``), so the
    escape probability given ``x`` is a binomial tail in ``y``.
    """
    counts = np.arange(trials + 1)
    tail = alpha / 4  # audited_epsilon_lower_bound: two-sided intervals at level alpha / 2
    lower = np.where(
        counts == 0, 0.0, stats.beta.ppf(tail, np.maximum(counts, 1), trials - counts + 1)
    )
    upper = np.where(
        counts == trials,
        1.0,
        stats.beta.ppf(1 - tail, counts + 1, np.maximum(trials - counts, 1)),
    )
    caught_below = np.searchsorted(upper, lower * math.exp(-epsilon), side="left")
    escape = stats.binom.sf(caught_below - 1, trials, q)
    escape[lower <= 0] = 1.0
    return float((stats.binom.pmf(counts, trials, p) * escape).sum())
