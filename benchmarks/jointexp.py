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
(n = 1000, m <= 29 here: well under a second). The original (google-research ``dp_multiq``)
does the forward step as a Toeplitz product by FFT, O(m n log n + m^2 n): about 20x faster at
m = 29, so this reimplementation must never stand in for the original's *time*.

Run as a script, this module is the JointExp protocol (``python -m benchmarks.jointexp``):
n = 1000, epsilon = 1, bounds [-100, 100], m = 1..29 evenly spaced quantiles, N(0, 5) and
U(-5, 5), ``--trials`` datasets per cell, add/remove (``--swap`` for the original's default
relation), error = misclassified points (dp_multiq's metric). The peer is the original
JointExp when ``--original DIR`` names a local snapshot holding ``dp_multiq/joint_exp.py``
(read-only, never copied into beam-dp; Apache-2.0), else this reimplementation (the report
says which). Per range of m it prints ``default / JointExp`` with a standard error from the
paired trials (the same datasets for every method).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt
from scipy.special import logsumexp

__all__ = ["joint_exp", "main", "range_ratio", "sensitivity"]

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


# --------------------------------------------------------------------------- the protocol

#: Ranges of m the issue reports on (inclusive bounds).
RANGES: tuple[tuple[int, int], ...] = ((1, 2), (3, 12), (13, 29))
Peer = Callable[[FloatArray, FloatArray, float, bool, np.random.Generator], FloatArray]


def load_original(directory: str) -> Peer:
    """The original JointExp from a local snapshot ``directory/dp_multiq/joint_exp.py``.

    Raises:
        ValueError: when the snapshot cannot be imported (naming the directory only).
    """
    root = str(Path(directory).resolve())
    if root not in sys.path:
        sys.path.insert(0, root)
    try:
        module = importlib.import_module("dp_multiq.joint_exp")
    except ImportError:
        raise ValueError(
            f"'--original' must name a directory holding dp_multiq/joint_exp.py; {root} does not"
        ) from None

    def peer(
        data: FloatArray, qs: FloatArray, epsilon: float, swap: bool, rng: np.random.Generator
    ) -> FloatArray:
        del rng  # the original draws from numpy's global generator (seeded in run())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # its log(0) = -inf, by design
            out: FloatArray = module.joint_exp(data, -100.0, 100.0, qs, epsilon, swap)
        return out

    return peer


def ours_peer(
    data: FloatArray, qs: FloatArray, epsilon: float, swap: bool, rng: np.random.Generator
) -> FloatArray:
    """This module's reimplementation, with the protocol's bounds."""
    return joint_exp(data, qs, lower=-100.0, upper=100.0, epsilon=epsilon, swap=swap, rng=rng)


def misclassified(sorted_values: FloatArray, truth: FloatArray, estimates: FloatArray) -> float:
    """dp_multiq's metric: mean over quantiles of ``|#(x > true) - #(x > estimate)|``."""
    above_true = np.searchsorted(sorted_values, truth, side="right")
    above_estimate = np.searchsorted(sorted_values, np.asarray(estimates), side="right")
    return float(np.abs(above_true - above_estimate).mean())


@dataclass
class Cell:
    """Per-trial errors and seconds of every method in one (data, m) cell."""

    errors: dict[str, list[float]] = field(default_factory=dict)
    seconds: dict[str, list[float]] = field(default_factory=dict)

    def add(self, name: str, error: float, seconds: float) -> None:
        self.errors.setdefault(name, []).append(error)
        self.seconds.setdefault(name, []).append(seconds)


def range_ratio(ours: Sequence[float], peer: Sequence[float]) -> tuple[float, float]:
    """``mean(ours) / mean(peer)`` over paired trials, and its delta-method standard error."""
    a = np.asarray(ours, dtype=np.float64)
    b = np.asarray(peer, dtype=np.float64)
    if a.shape != b.shape or a.size < 2:
        raise ValueError("'ours' and 'peer' must be paired samples of the same size >= 2")
    ratio = float(a.mean() / b.mean())
    cov = np.cov(a, b) / a.size
    var = ratio**2 * (
        cov[0, 0] / a.mean() ** 2
        + cov[1, 1] / b.mean() ** 2
        - 2 * cov[0, 1] / (a.mean() * b.mean())
    )
    return ratio, float(np.sqrt(max(var, 0.0)))


def run(args: argparse.Namespace, peer: Peer) -> dict[tuple[str, int], Cell]:
    """Every cell of the protocol: the peer and beam-dp's splits on the same datasets."""
    from beam_dp.summaries.histogram import Grid
    from beam_dp.summaries.quantiles import plan_quantiles, select_quantiles

    rng = np.random.default_rng(args.seed)
    np.random.seed(args.seed + 1)  # the original's global generator (benchmark only)
    grid = Grid.uniform(-100.0, 100.0, args.points)
    relation = "replace" if args.swap else "add_remove"
    cells: dict[tuple[str, int], Cell] = {}
    for distribution in ("gaussian", "uniform"):
        for m in range(1, args.max_m + 1, args.m_step):
            qs = np.linspace(0.0, 1.0, m + 2)[1:-1]
            plans = {
                split: plan_quantiles(
                    qs.tolist(),
                    epsilon=args.epsilon,
                    num_candidates=args.points,
                    split=split,
                    relation=relation,
                )
                for split in ("auto", "recursive", "joint", "independent")
            }
            cell = cells.setdefault((distribution, m), Cell())
            for _ in range(args.trials):
                if distribution == "gaussian":
                    data = np.sort(rng.normal(0.0, 5.0, args.n))
                else:
                    data = np.sort(rng.uniform(-5.0, 5.0, args.n))
                truth = np.quantile(data, qs, method="lower")
                start = time.perf_counter()
                estimate = peer(data, qs, args.epsilon, args.swap, rng)
                cell.add("jointexp", misclassified(data, truth, estimate), _since(start))
                start = time.perf_counter()
                histogram = grid.histogram(data)
                build = _since(start)
                for split, plan in plans.items():
                    start = time.perf_counter()
                    selection = select_quantiles(histogram, grid, plan)
                    took = build + _since(start)
                    values = np.asarray(selection.values)
                    cell.add(split, misclassified(data, truth, values), took)
    return cells


def _since(start: float) -> float:
    return time.perf_counter() - start


def report(
    cells: dict[tuple[str, int], Cell], args: argparse.Namespace, peer_name: str
) -> list[str]:
    """The per-m table, the per-range ratios with standard errors, and the times."""
    names = ("jointexp", "auto", "recursive", "joint", "independent")
    lines = [
        f"JointExp protocol: n = {args.n}, epsilon = {args.epsilon}, "
        f"{'swap' if args.swap else 'add/remove'}, {args.trials} trials per cell, "
        f"grid {args.points:,}; peer: {peer_name}",
        "",
        "| data | m | JointExp | default (auto) | recursive | joint | independent "
        "| default / JointExp |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for (distribution, m), cell in cells.items():
        means = [float(np.mean(cell.errors[name])) for name in names]
        ratio = means[1] / max(means[0], 1e-12)
        row = " | ".join(f"{value:.2f}" for value in means)
        lines.append(f"| {distribution} | {m} | {row} | {ratio:.2f} |")
    lines += [
        "",
        "| m | default / JointExp | SE | recursive / JointExp | joint / JointExp (SE) "
        "| independent / JointExp |",
    ]
    lines.append("|---|---:|---:|---:|---:|---:|")
    for low, high in [*RANGES, (1, 29)]:
        chosen = [cell for (_, m), cell in cells.items() if low <= m <= high]
        if not chosen:
            continue
        peer = [e for cell in chosen for e in cell.errors["jointexp"]]
        ratios = {
            name: range_ratio([e for cell in chosen for e in cell.errors[name]], peer)
            for name in ("auto", "recursive", "joint", "independent")
        }
        lines.append(
            f"| {low}-{high} | {ratios['auto'][0]:.3f} | {ratios['auto'][1]:.3f} | "
            f"{ratios['recursive'][0]:.3f} | {ratios['joint'][0]:.3f} ({ratios['joint'][1]:.3f}) "
            f"| {ratios['independent'][0]:.3f} |"
        )
    lines += [
        "",
        "| m | JointExp ms/trial (median) | default ms/release (median) |",
        "|---|---:|---:|",
    ]
    for m in sorted({m for _, m in cells}):
        peer_s = [s for (_, k), c in cells.items() if k == m for s in c.seconds["jointexp"]]
        ours_s = [s for (_, k), c in cells.items() if k == m for s in c.seconds["auto"]]
        lines.append(f"| {m} | {1e3 * np.median(peer_s):.1f} | {1e3 * np.median(ours_s):.1f} |")
    return lines


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line; ``--quick`` is the smoke run of the test suite."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.jointexp", description=__doc__)
    parser.add_argument("--original", default=None, help="local dp_multiq snapshot directory")
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--max-m", type=int, default=29)
    parser.add_argument("--m-step", type=int, default=1)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--points", type=int, default=10**5)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=2021)
    parser.add_argument("--swap", action="store_true")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.trials, args.max_m, args.m_step, args.n, args.points = 3, 4, 3, 200, 10**4
    return args


def main(argv: Sequence[str] | None = None) -> list[str]:
    """Run the protocol and print its tables (also returned, for tests)."""
    args = parse(argv)
    if args.original is not None:
        peer, name = load_original(args.original), "the original dp_multiq JointExp"
    else:
        peer, name = ours_peer, "benchmarks/jointexp.py (reimplementation; times not comparable)"
    lines = report(run(args, peer), args, name)
    print("\n".join(lines))
    return lines


if __name__ == "__main__":
    main()
