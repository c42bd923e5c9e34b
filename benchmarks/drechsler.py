"""The exponential-mechanism interval of Drechsler, Globus-Harris, McMillan, Sarathy and Smith,
"Nonparametric Differentially Private Confidence Intervals for the Median" (JSSAM 2022), for
the benchmark only: a baseline for beam-dp's quantile intervals. Float sampling from numpy's
generator; never used for a release.

The paper estimates the two ends of the interval directly, each with the exponential mechanism
for a quantile on ``[lower, upper]`` at half the epsilon, at quantiles moved outwards from
1/2 so that the private ends still bracket the target. The mechanism (reimplemented here from
the description, not copied): the data and the two bounds are sorted into ``z``; the points up
to the target index move down by the granularity ``g`` and the others up by ``g`` (inside the
bounds), so that the target's interval has length at least ``2 g``; an interval ``(z_{i-1},
z_i)`` is drawn with probability proportional to its length times ``exp(-eps |i - n q| / 2)``
and a point uniformly inside it; the ends are then widened by ``g``.

For a randomization interval (the data's own median, the quantity beam-dp's intervals hold)
only the privacy error needs covering: the paper's first ("naive") adjustment moves the targets
by ``t = r / n`` ranks with ``r`` from the mechanism's tail, ``P(rank error >= r) <= ((R - 2g)
/ 2g) exp(-eps_e (r - 1) / 2)`` (``R = upper - lower``, ``eps_e = eps / 2``), set to
``beta / 2`` per end. We derive that bound for the mechanism as implemented here (sensitivity
1 under replace: the rank of a location moves by at most one) rather than reuse the paper's
constant, so that its coverage holds by construction. The median is the interval's midpoint
(the paper releases no point estimate); ``n`` is public (bounded DP, replace).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import stats

__all__ = [
    "DrechslerResult",
    "drechsler_interval",
    "drechsler_population_interval",
    "em_quantile",
    "simultaneous_ranks",
]


@dataclass(frozen=True)
class DrechslerResult:
    median: float
    lower: float
    upper: float


def em_quantile(
    values: npt.ArrayLike,
    lower: float,
    upper: float,
    quantile: float,
    *,
    epsilon: float,
    granularity: float,
    rng: np.random.Generator,
) -> float:
    """The paper's exponential mechanism for one quantile (module docstring)."""
    data = np.clip(np.asarray(values, dtype=np.float64), lower, upper)
    z = np.sort(np.concatenate([data, [lower, upper]]))
    n = z.size
    split = min(n, math.floor(n * quantile) + 1)
    z[:split] = np.maximum(lower, z[:split] - granularity)
    z[split:] = np.minimum(z[split:] + granularity, upper)
    lengths = np.diff(z)
    ranks = np.arange(1, n)
    with np.errstate(divide="ignore"):
        logw = np.log(lengths) - epsilon * np.abs(ranks - n * quantile) / 2
    weights = np.exp(logw - logw.max())
    i = int(rng.choice(n - 1, p=weights / weights.sum()))
    return float(rng.uniform(z[i], z[i + 1]))


def drechsler_interval(
    values: npt.ArrayLike,
    lower: float,
    upper: float,
    *,
    epsilon: float,
    beta: float = 0.05,
    granularity: float = 0.5,
    rng: np.random.Generator,
) -> DrechslerResult:
    """A ``1 - beta`` randomization interval for the median, ``epsilon / 2`` per end."""
    data = np.asarray(values, dtype=np.float64)
    n = data.size + 2
    per_end = epsilon / 2
    span = upper - lower
    ratio = max((span - 2 * granularity) / (2 * granularity), 1.0)
    ranks = 2 / per_end * math.log(ratio / (beta / 2)) + 1
    shift = ranks / n
    ends = [
        em_quantile(
            data,
            lower,
            upper,
            min(max(0.5 + sign * shift, 0.0), 1.0),
            epsilon=per_end,
            granularity=granularity,
            rng=rng,
        )
        for sign in (-1, 1)
    ]
    low = max(lower, min(ends) - granularity)
    high = min(upper, max(ends) + granularity)
    return DrechslerResult(median=(low + high) / 2, lower=low, upper=high)


def simultaneous_ranks(
    n: int, epsilon: float, span: float, granularity: float, beta: float
) -> tuple[int, int]:
    """The paper's simultaneous targets for a population median interval: the ranks ``k`` (lower
    end) and ``n + 1 - k``-style upper rank whose total failure probability, sampling and
    privacy together, is at most ``beta / 2`` each.

    With ``m = #(X <= xi)`` binomial(n, 1/2), the lower end fails when the mechanism's output
    rank is at least ``m``: ``P(fail) <= P(m <= k) + sum_{m > k} P(m) min(1, c exp(-eps (m - k
    - 1) / 2))`` with ``c = (R - 2 g) / (2 g)``, the mechanism's tail (module docstring), and the
    target ``k`` is the largest rank that keeps it within ``beta / 2``; the upper end mirrors it.
    """
    ratio = max((span - 2 * granularity) / (2 * granularity), 1.0)
    ranks = np.arange(n + 1)
    pmf = stats.binom.pmf(ranks, n, 0.5)
    best = 0
    for k in range(n // 2, -1, -1):
        tail = np.minimum(1.0, ratio * np.exp(-epsilon * (ranks[k + 1 :] - k - 1) / 2))
        fail = float(pmf[: k + 1].sum() + (pmf[k + 1 :] * tail).sum())
        if fail <= beta / 2:
            best = k
            break
    return best, n - best


def drechsler_population_interval(
    values: npt.ArrayLike,
    lower: float,
    upper: float,
    *,
    epsilon: float,
    beta: float = 0.05,
    granularity: float = 0.5,
    rng: np.random.Generator,
) -> DrechslerResult:
    """The paper's population interval for the median (sampling and privacy together), both
    ends by the exponential mechanism at ``epsilon / 2``."""
    data = np.asarray(values, dtype=np.float64)
    n = data.size
    per_end = epsilon / 2
    low_rank, high_rank = simultaneous_ranks(n, per_end, upper - lower, granularity, beta)
    z = n + 2  # the mechanism's ranks count the two bounds
    ends = [
        em_quantile(
            data,
            lower,
            upper,
            min(max((rank + 1) / z, 0.0), 1.0),
            epsilon=per_end,
            granularity=granularity,
            rng=rng,
        )
        for rank in (low_rank, high_rank)
    ]
    low = max(lower, min(ends) - granularity)
    high = min(upper, max(ends) + granularity)
    return DrechslerResult(median=(low + high) / 2, lower=low, upper=high)
