"""JointExp (Gillenwater, Joseph, Kulesza 2021, "Differentially Private Quantiles"), for the
benchmark only: a baseline to compare beam-dp's many-quantile methods with. Not exact
sampling (float log-space, numpy's generator), never used for a release.

The mechanism, as described in the paper: clip the ``n`` sorted values to ``[a, b]`` and add
``x_0 = a``, ``x_{n+1} = b``; the ``n + 1`` intervals ``I_i = [x_i, x_{i+1})`` carry the output.
Outputs ``o_1 <= ... <= o_m`` (with ``o_0 = a``, ``o_{m+1} = b``) are scored by

    u(o) = - sum_{j=1}^{m+1} | #{x : o_{j-1} < x <= o_j} - (q_j - q_{j-1}) n |

(``q_0 = 0``, ``q_{m+1} = 1``), and the exponential mechanism samples them from the density
``exp(eps u(o) / (2 Delta))`` over the ordered outputs (Lebesgue base measure). With
``o_j`` in interval ``i_j`` the count between ``o_{j-1}`` and ``o_j`` is ``i_j - i_{j-1}``, so
the density is constant on each assignment of outputs to intervals; an assignment where ``k``
outputs share interval ``i`` has volume ``|I_i|^k / k!``. Sensitivity: 2 under swap; under
add/remove one count and every target move, giving ``2 (1 - min gap)`` where the gaps are
``q_1, q_2 - q_1, ..., 1 - q_m``.

Sampling is a forward dynamic program over the quantiles (state: the interval of ``o_j`` and
how many earlier outputs share it, for the ``1/k!``), then a backward pass that draws the
intervals, and finally uniform points inside them, sorted. Cost O(m n^2 + m^2 n) per draw
(n = 1000, m <= 29 here: well under a second).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from scipy.special import logsumexp

__all__ = ["joint_exp", "sensitivity"]

FloatArray = npt.NDArray[np.float64]


def sensitivity(quantiles: FloatArray, swap: bool) -> float:
    """The utility's sensitivity: 2 under swap, ``2 (1 - min gap)`` under add/remove."""
    if swap:
        return 2.0
    gaps = np.diff(np.concatenate([[0.0], quantiles, [1.0]]))
    return float(2.0 * (1.0 - gaps.min()))


def _sample_log(log_weights: FloatArray, rng: np.random.Generator) -> int:
    """Index drawn with probability proportional to ``exp(log_weights)`` (flattened)."""
    flat = log_weights.ravel()
    top = np.max(flat)
    weights = np.exp(flat - top)
    weights /= weights.sum()
    return int(rng.choice(flat.size, p=weights))


def joint_exp(
    values: npt.ArrayLike,
    quantiles: npt.ArrayLike,
    *,
    lower: float,
    upper: float,
    epsilon: float,
    swap: bool = False,
    rng: np.random.Generator | None = None,
) -> FloatArray:
    """JointExp estimates of ``quantiles`` (increasing, in (0, 1)) of ``values``.

    Args:
        values: the data (any order); clipped to ``[lower, upper]``.
        quantiles: increasing quantiles strictly between 0 and 1.
        lower, upper: the public data bounds.
        epsilon: the privacy parameter of the whole (joint) release.
        swap: True for swap (replace) neighbours, False for add/remove.
        rng: numpy generator (benchmark only).

    Returns:
        The sorted estimates, one per quantile.
    """
    generator = np.random.default_rng() if rng is None else rng
    qs = np.asarray(quantiles, dtype=np.float64)
    data = np.sort(np.clip(np.asarray(values, dtype=np.float64), lower, upper))
    n = data.size
    m = qs.size
    edges = np.concatenate([[lower], data, [upper]])
    lengths = np.diff(edges)  # n + 1 intervals
    with np.errstate(divide="ignore"):
        log_lengths = np.log(lengths)  # -inf for empty intervals (ties): never chosen
    rate = epsilon / (2.0 * sensitivity(qs, swap))
    targets = np.diff(np.concatenate([[0.0], qs, [1.0]])) * n  # m + 1 target counts
    positions = np.arange(n + 1, dtype=np.float64)

    # log_phi_j(i_prev, i) = -rate * |i - i_prev - target_j|, for i >= i_prev.
    def log_phi(j: int) -> FloatArray:
        gap = positions[None, :] - positions[:, None]
        out: FloatArray = -rate * np.abs(gap - targets[j])
        return out

    # forward[j][i, r]: log weight of o_1..o_{j+1} with o_{j+1} in interval i and exactly r
    # of the earlier outputs also in interval i.
    forward: list[FloatArray] = []
    first = np.full((n + 1, m), -np.inf)
    first[:, 0] = -rate * np.abs(positions - targets[0]) + log_lengths
    forward.append(first)
    lower_strict = np.tril(np.ones((n + 1, n + 1), dtype=bool), k=-1).T  # i_prev < i
    for j in range(1, m):
        previous = forward[-1]
        runs = logsumexp(previous, axis=1)  # over r
        phi = log_phi(j)
        moves = np.where(lower_strict, runs[:, None] + phi, -np.inf)
        current = np.full((n + 1, m), -np.inf)
        current[:, 0] = logsumexp(moves, axis=0) + log_lengths
        stay = -rate * abs(targets[j])  # i_prev == i: the count between them is 0
        for r in range(1, j + 1):
            current[:, r] = previous[:, r - 1] + stay + log_lengths - np.log(r + 1)
        forward.append(current)

    # Backward: draw the interval of o_m (and its run length), then the earlier runs.
    intervals = np.zeros(m, dtype=np.int64)
    last_term = -rate * np.abs(n - positions - targets[m])
    weights = forward[m - 1] + last_term[:, None]
    j = m - 1
    limit = n + 1  # the next run must lie in an interval < limit
    while j >= 0:
        if limit < n + 1:
            weights = forward[j][:limit] + (log_phi(j + 1)[:limit, limit])[:, None]
        index = _sample_log(weights, generator)
        interval, run = divmod(index, m)
        for k in range(j - run, j + 1):
            intervals[k] = interval
        j -= run + 1
        limit = interval
    low = edges[intervals]
    high = edges[intervals + 1]
    return np.sort(generator.uniform(low, high))
