"""Two many-quantile anchors reimplemented from their papers, for ``benchmarks/multiq.py`` only.

Floating-point sampling from numpy's generator: benchmark baselines, never used for a release.
Both read the data size ``n`` as public (as both papers do: the swap relation), clip the data to
public bounds ``[lower, upper]`` and release real numbers inside them.

1. **Kaplan, Schnapp, Stemmer (ICML 2022), ApproxQuantiles** (:func:`kaplan_quantiles`): the
   middle quantile of the set is released by the exponential mechanism over the intervals
   between consecutive sorted data points (Smith, STOC 2011): interval ``[x_i, x_{i+1}]`` (with
   ``x_0 = lower``, ``x_{k+1} = upper``) has utility ``-|i - q k|`` and weight
   ``length * exp(eps' * utility / 2)``; a point is then drawn uniformly inside it. The data
   and the quantiles are split at the released value and both sides recurse (the quantiles
   rescaled to their side). ``eps' = eps / (floor(log2 m) + 1)``, the recursion's depth: every
   row is in one sub-problem per level.
2. **Imola et al. (NeurIPS 2025), slicing by continual counting** (:func:`slice_quantiles`),
   our reconstruction (we could not rebuild the paper's algorithm line by line): the target
   ranks ``t_j = floor(q_j n)`` are made noisy as prefix sums of the stream of their gaps
   ``t_j - t_{j-1}`` with the binary-tree counting mechanism (Laplace noise of scale
   ``L / eps_1`` on every dyadic node, ``L`` the tree's levels; adding a row shifts every target
   above it by one, which is one stream entry changed by one). The sorted data is cut into
   ``m`` disjoint slices at the midpoints between consecutive noisy targets, and in slice ``j``
   the value is drawn by the same Smith exponential mechanism (``eps_2``) with utility
   ``-|B_{j-1} + i - T_j|`` (the global rank of the interval against the noisy target).
   ``eps_1 = eps_2 = eps / 2``; the slices are disjoint, so the in-slice draws compose in
   parallel. How it may differ from the paper: the paper's split of epsilon, its slice widths
   (we use the whole gap between targets) and its exact continual-counting mechanism (it may
   use a tighter one than the plain binary tree) are not reproduced; its error bound
   ``O((log b + log^2 m) / eps)`` has the same shape as this version's (tree noise
   ``O(log^1.5 m / eps)`` plus one exponential mechanism ``O(log b / eps)``).

**Ties.** Both methods need distinct values (a tie block is a run of zero-length intervals,
which the mechanism never draws). For an integer column, ``spread_ties`` places the ``c``
copies of ``v`` evenly inside ``(v - 1/2, v + 1/2)`` and the released values are rounded back
to integers (the expansion PostRI uses, ``benchmarks/postri.py``); this is the anchors' best
treatment we know of, so the comparison is not flattered by their tie weakness.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

__all__ = ["kaplan_quantiles", "slice_quantiles", "smith_quantile", "spread_ties"]


def spread_ties(sorted_integers: FloatArray) -> FloatArray:
    """The ``j``-th of ``c`` copies of ``v`` becomes ``v - 1/2 + (j + 1/2) / c`` (all distinct)."""
    values, starts, counts = np.unique(sorted_integers, return_index=True, return_counts=True)
    positions = np.arange(sorted_integers.size) - np.repeat(starts, counts)
    return np.repeat(values - 0.5, counts) + (positions + 0.5) / np.repeat(counts, counts)


def smith_quantile(
    sorted_values: FloatArray,
    target: float,
    epsilon: float,
    lower: float,
    upper: float,
    rng: np.random.Generator,
    rank_offset: float = 0.0,
) -> float:
    """One value by the exponential mechanism over intervals between sorted points (Smith 2011).

    Interval ``i`` (``0..k``) lies between the ``i``-th and ``i+1``-th point of
    ``[lower, values..., upper]``; its utility is ``-|rank_offset + i - target|``.
    """
    edges = np.concatenate(([lower], np.clip(sorted_values, lower, upper), [upper]))
    lengths = np.diff(edges)
    utility = -np.abs(rank_offset + np.arange(lengths.size) - target)
    with np.errstate(divide="ignore"):
        log_weights = np.log(lengths) + epsilon * utility / 2.0
    chosen = int(np.argmax(log_weights + rng.gumbel(size=log_weights.size)))
    return float(edges[chosen] + rng.uniform() * lengths[chosen])


def kaplan_quantiles(
    sorted_values: FloatArray,
    quantiles: list[float],
    epsilon: float,
    lower: float,
    upper: float,
    rng: np.random.Generator,
) -> list[float]:
    """Kaplan-Schnapp-Stemmer's recursive ApproxQuantiles (sorted quantiles in, values out)."""
    levels = math.floor(math.log2(len(quantiles))) + 1
    per_level = epsilon / levels
    released: list[float] = [0.0] * len(quantiles)

    def recurse(data: FloatArray, qs: list[float], first: int, low: float, high: float) -> None:
        if not qs:
            return
        middle = len(qs) // 2
        q = qs[middle]
        value = smith_quantile(data, q * data.size, per_level, low, high, rng)
        released[first + middle] = value
        cut = int(np.searchsorted(data, value, side="right"))
        recurse(data[:cut], [p / q for p in qs[:middle]], first, low, value)
        rest = [(p - q) / (1.0 - q) for p in qs[middle + 1 :]]
        recurse(data[cut:], rest, first + middle + 1, value, high)

    recurse(np.clip(sorted_values, lower, upper), sorted(quantiles), 0, lower, upper)
    return released


def tree_prefix_noise(length: int, scale: float, rng: np.random.Generator) -> FloatArray:
    """The binary-tree mechanism's noise on each prefix sum ``1..j`` of a stream of ``length``."""
    levels = max(1, math.ceil(math.log2(length))) + 1
    node_noise = [rng.laplace(scale=scale, size=(length >> level) + 1) for level in range(levels)]
    noise = np.zeros(length)
    for j in range(1, length + 1):
        total, start = 0.0, 0
        for level in reversed(range(levels)):  # the dyadic blocks of [0, j)
            if j - start >= 1 << level:
                total += node_noise[level][start >> level]
                start += 1 << level
        noise[j - 1] = total
    return noise


def slice_quantiles(
    sorted_values: FloatArray,
    quantiles: list[float],
    epsilon: float,
    lower: float,
    upper: float,
    rng: np.random.Generator,
) -> list[float]:
    """Our reconstruction of Imola et al.'s slicing by continual counting (module docstring)."""
    n, m = sorted_values.size, len(quantiles)
    levels = max(1, math.ceil(math.log2(m))) + 1
    targets = np.floor(np.array(sorted(quantiles)) * n)
    noisy = targets + tree_prefix_noise(m, levels / (epsilon / 2.0), rng)
    cuts = np.clip(np.floor((noisy[:-1] + noisy[1:]) / 2.0), 0, n).astype(np.int64)
    bounds = np.concatenate(([0], np.maximum.accumulate(cuts), [n]))
    data = np.clip(sorted_values, lower, upper)
    return [
        smith_quantile(
            data[bounds[j] : bounds[j + 1]],
            float(noisy[j]),
            epsilon / 2.0,
            lower,
            upper,
            rng,
            rank_offset=float(bounds[j]),
        )
        for j in range(m)
    ]
