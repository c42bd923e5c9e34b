"""PostRI (Humphries, Li, Zhang, Knopf, He 2026, "Interpreting the Error of Differentially
Private Median Queries through Randomization Intervals", arXiv 2604.07581), for the benchmark
only: a baseline for beam-dp's quantile intervals. Float sampling from numpy's generator;
never used for a release.

The method, as we read the paper and its authors' artifact (reimplemented here, not copied):

1. **Median.** The exponential mechanism over an integer domain ``[lo, hi]`` with utility
   ``-|#(x <= o) - floor(n / 2)|`` (sensitivity 1, weight ``exp(eps_1 u / 2)``): the domain is
   cut at the data values into runs of equal utility, a run is drawn with probability
   proportional to its length times its weight, then an integer uniformly inside it.
2. **Width.** ``b`` from ``{s, 2s, ..., s floor(D / s)}`` (``D`` the domain's size, step
   ``s = max(floor(2 / eps_2), 1)``) by the exponential mechanism with utility
   ``-|f_b - C_1 - C_2 - s|``, where ``f_b = min(#(o - b < x <= o), #(o < x <= o + b))`` is
   the number of values between the median and the nearer end, ``C_1 = 2 ln(D / beta_1) /
   eps_1`` bounds the median's rank error and ``C_2 = 2 ln(D / (s beta_2)) / eps_2`` the width
   selection's; the interval is ``[o - b, o + b]`` cut to the public bounds. ``f_b`` moves by
   at most 1 when one value is added, removed or replaced, so we use sensitivity 1 in the
   weight ``exp(eps_2 u / 2)`` (the artifact passes 2 to its sampler while computing ``C_2``
   with 1; 1 is valid and gives PostRI narrower intervals, so the comparison is conservative
   for us).
3. **Ties** ("a discrete, non-repeating data domain"): the ``j``-th copy of an integer value
   ``x`` becomes ``n x + j`` in an expanded domain of ``n`` times the size; outputs are mapped
   back by ``floor(y / n)``.
4. **Split.** ``beta_1 = beta_2 = beta / 2``; ``eps_1 = eps_2`` by default, or the paper's
   optimal split ``eps_1 = eps_2 sqrt(ln(D / beta_1) / ln(D / (s beta_2)))`` iterated with
   ``s`` to a fixed point (:func:`optimal_split`).

The median uses ``n`` (bounded DP: the replace relation, where the data size is public).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["PostRIResult", "optimal_split", "postri", "postri_median"]

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class PostRIResult:
    median: float
    lower: float
    upper: float
    epsilon_median: float
    epsilon_width: float


def _expand(values: IntArray) -> IntArray:
    """The ``j``-th copy of ``x`` becomes ``n x + j`` (sorted, distinct)."""
    n = values.size
    ordered = np.sort(values)
    first = np.searchsorted(ordered, ordered, side="left")
    return ordered * n + (np.arange(n) - first)


def _em_median(
    points: IntArray, lower: int, upper: int, epsilon: float, rng: np.random.Generator
) -> int:
    """Step 1 on the sorted distinct integers ``points`` inside ``[lower, upper]``."""
    n = points.size
    edges = np.concatenate([[lower], points, [upper + 1]])
    lengths = np.diff(edges).astype(np.float64)  # run i = [edges[i], edges[i+1]), rank i
    ranks = np.arange(n + 1)
    utility = -np.abs(ranks - n // 2).astype(np.float64)
    logw = np.where(lengths > 0, np.log(np.maximum(lengths, 1.0)), -np.inf) + epsilon * utility / 2
    weights = np.exp(logw - logw.max())
    run = int(rng.choice(n + 1, p=weights / weights.sum()))
    return int(rng.integers(edges[run], edges[run + 1]))


def _width(
    points: IntArray,
    median: int,
    domain: int,
    step: int,
    target: float,
    epsilon: float,
    sensitivity: float,
    rng: np.random.Generator,
) -> int:
    """Step 2: ``b = s t``, ``t = 1..T``, grouped into runs of equal ``f_b``."""
    top = max(domain // step, 1)
    left = median - points[points <= median]  # >= 0: counted when < b
    right = points[points > median] - median  # > 0: counted when <= b
    start_left = np.sort(left // step + 1)  # counted from t = left // s + 1 on
    start_right = np.sort(-(-right // step))  # ceil(right / s)
    breaks = np.unique(np.concatenate([[1, top + 1], start_left, start_right]))
    breaks = breaks[(breaks >= 1) & (breaks <= top + 1)]
    starts, stops = breaks[:-1], breaks[1:]
    count_left = np.searchsorted(start_left, starts, side="right")
    count_right = np.searchsorted(start_right, starts, side="right")
    f = np.minimum(count_left, count_right).astype(np.float64)
    utility = -np.abs(f - target)
    logw = np.log((stops - starts).astype(np.float64)) + epsilon * utility / (2 * sensitivity)
    weights = np.exp(logw - logw.max())
    run = int(rng.choice(starts.size, p=weights / weights.sum()))
    return step * int(rng.integers(starts[run], stops[run]))


def optimal_split(epsilon: float, domain: int, beta: float, iterations: int = 100) -> float:
    """The paper's epsilon split: ``eps_1`` for the median (the rest is the width's)."""
    beta_1 = beta_2 = beta / 2
    step = 1
    eps_1 = eps_2 = epsilon / 2
    for _ in range(iterations):
        ratio = math.sqrt(math.log(domain / beta_1) / math.log(domain / (step * beta_2)))
        eps_2 = epsilon / (1 + ratio)
        eps_1 = eps_2 * ratio
        new_step = max(int(2 / eps_2), 1)
        if new_step == step:
            break
        step = new_step
    return eps_1


def postri(
    values: npt.ArrayLike,
    lower: int,
    upper: int,
    *,
    epsilon: float,
    beta: float = 0.05,
    median_fraction: float | None = 0.5,
    width_sensitivity: float = 1.0,
    rng: np.random.Generator,
) -> PostRIResult:
    """PostRI on integer ``values`` with public integer bounds ``[lower, upper]``.

    ``median_fraction`` is ``eps_1 / epsilon`` (None: the paper's optimal split).
    """
    data = np.clip(np.asarray(values, dtype=np.int64), lower, upper)
    n = data.size
    expanded = _expand(data)
    low, high = lower * n, upper * n + (n - 1)
    domain = high - low
    eps_1 = (
        optimal_split(epsilon, domain, beta)
        if median_fraction is None
        else epsilon * median_fraction
    )
    eps_2 = epsilon - eps_1
    beta_1 = beta_2 = beta / 2
    step = max(int(2 / eps_2), 1)
    c_1 = 2 / eps_1 * math.log(domain / beta_1)
    c_2 = 2 / eps_2 * math.log(domain / (step * beta_2))
    median = _em_median(expanded, low, high, eps_1, rng)
    b = _width(expanded, median, domain, step, c_1 + c_2 + step, eps_2, width_sensitivity, rng)
    lo_e, hi_e = max(median - b, low), min(median + b, high)
    return PostRIResult(
        median=float(median // n),
        lower=float(lo_e // n),
        upper=float(hi_e // n),
        epsilon_median=eps_1,
        epsilon_width=eps_2,
    )


def postri_median(
    values: npt.ArrayLike, lower: int, upper: int, *, epsilon: float, rng: np.random.Generator
) -> float:
    """PostRI's median alone (step 1 at the whole ``epsilon``, in the expanded domain)."""
    data = np.clip(np.asarray(values, dtype=np.int64), lower, upper)
    n = data.size
    median = _em_median(_expand(data), lower * n, upper * n + (n - 1), epsilon, rng)
    return float(median // n)
