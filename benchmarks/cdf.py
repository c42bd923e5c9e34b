"""A private CDF (issue 11): speed of the exact KS synthetic-sample sampler, and its accuracy.

Run from the repository root::

    PYTHONPATH=/work/main /work/benchvenv/bin/python -m benchmarks.cdf   # ~30 min, with OpenDP
    PYTHONPATH=/work/main .venv/bin/python -m benchmarks.cdf --quick     # seconds (smoke test)

Sections (``--only speed|scaling|utility`` runs one):

1. **speed**: the issue's target: m = 1 000 uniform grid points on [0, 20], k = 100,
   n = 10^6 lognormal(0, 1) values, epsilon = 1, ``replace``; seconds per release (planning
   included), median of ``--repeats`` releases, against the 5 s target; also at the ``k`` that
   :func:`ks_suggested_k` picks for this n.
2. **scaling**: seconds per release as m, k, epsilon and n vary around the target case, with
   the number of band counts (dynamic programs) the planner ran and the blocks it made.
3. **utility**: KS distance at the grid points between each released CDF and the data's
   (snapped) empirical CDF, n = 10^3 ... 10^6 (``--max-exponent``; 7 for 10^7), epsilon = 1,
   ``replace`` (n public), on lognormal(0, 1) and on a bimodal mixture
   (0.5 N(5, 1) + 0.5 N(12, 1.5)), both clamped to [0, 20], on uniform grids of ``--grids``
   points; mean over ``--runs`` datasets. Methods, all at epsilon = 1 on the same counts:

   * **KS mechanism**: ``k = ks_suggested_k(m, epsilon, n)``; its 95% bound is printed too.
   * **noisy histogram (clamped)**: exact discrete Laplace of scale 2/epsilon per grid point
     (L1 sensitivity 2 under ``replace``), negatives set to 0, cumulated, over their total.
   * **noisy histogram (isotonic)**: the same noise cumulated unclamped, over the public n,
     clipped to [0, 1], made monotone by isotonic regression (least squares).
   * **recursive quantiles**: ``beam_dp.summaries.quantiles`` (``split="recursive"``) on the
     same grid histogram (values inside a cell stay in its slot: not ties) at levels
     j / (Q + 1), read as a CDF (middle of the levels between
     released points); Q = 2**h - 1 chosen from public bounds (:func:`quantile_count`).
   * **OpenDP b-ary tree** (OpenDP 0.16, only where importable, e.g. ``/work/benchvenv``):
     ``make_b_ary_tree >> then_laplace`` calibrated by OpenDP for L1 distance 2,
     ``make_consistent_b_ary_tree`` and ``make_cdf`` postprocessors; branching factor from
     ``choose_branching_factor``.

   Least-squares slopes of log KS against log n are compared with the seed's n^-1/3.

The grid-point distance is the mechanism's own error; the distance to the raw data's CDF adds
the grid's resolution (public, the same for every method), which is not measured here.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from beam_dp.mechanisms.cdf import (
    KSMechanism,
    cumulative_counts_from_slots,
    ks_accuracy_bound,
    ks_suggested_k,
    sample_ks_synthetic,
)
from beam_dp.mechanisms.cdf.bands import path_from_points
from beam_dp.mechanisms.cdf.ks import Sampler
from beam_dp.mechanisms.partition_selection import discrete_laplace
from beam_dp.summaries.histogram import Grid
from beam_dp.summaries.quantiles import plan_quantiles, select_quantiles

LOWER, UPPER = 0.0, 20.0
TARGET_SECONDS = 5.0
QUICK_M = 50

Generator = Callable[[np.random.Generator, int], npt.NDArray[np.float64]]


def lognormal(rng: np.random.Generator, n: int) -> npt.NDArray[np.float64]:
    return rng.lognormal(0.0, 1.0, n)


def bimodal(rng: np.random.Generator, n: int) -> npt.NDArray[np.float64]:
    first = rng.random(n) < 0.5
    return np.where(first, rng.normal(5.0, 1.0, n), rng.normal(12.0, 1.5, n))


DISTRIBUTIONS: dict[str, Generator] = {"lognormal": lognormal, "bimodal": bimodal}


def cumulative_counts(values: npt.NDArray[np.float64], m: int) -> list[int]:
    """N_i = #(x <= g_i) on a uniform grid of m points over [LOWER, UPPER] (values clamped;
    a value inside a cell counts at the cell's upper grid point)."""
    grid = np.linspace(LOWER, UPPER, m)
    clamped = np.sort(np.clip(values, LOWER, UPPER))
    counts = np.searchsorted(clamped, grid, side="right")
    counts[-1] = clamped.size
    return [int(c) for c in counts]


def ks_at_grid(counts: Sequence[int], released_cdf: npt.NDArray[np.float64]) -> float:
    n = counts[-1]
    return float(np.max(np.abs(np.asarray(counts, dtype=np.float64) / n - released_cdf)))


def ks_release_cdf(counts: Sequence[int], k: int, epsilon: float) -> npt.NDArray[np.float64]:
    points = sample_ks_synthetic(counts, k=k, epsilon=epsilon, relation="replace")
    return np.asarray(path_from_points(points, len(counts)), dtype=np.float64) / k


def noisy_histogram_cdf(counts: Sequence[int], epsilon: float) -> npt.NDArray[np.float64]:
    per_point = np.diff(np.asarray(counts, dtype=np.int64), prepend=0)
    noisy = np.maximum(per_point + discrete_laplace(2 / epsilon, per_point.size), 0)
    total = noisy.sum()
    if total == 0:
        return np.linspace(1 / per_point.size, 1.0, per_point.size)
    return np.cumsum(noisy) / total


def isotonic(values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """The non-decreasing least-squares fit (pool adjacent violators)."""
    sums: list[float] = []
    sizes: list[int] = []
    for v in values.tolist():
        sums.append(v)
        sizes.append(1)
        while len(sums) > 1 and sums[-2] * sizes[-1] > sums[-1] * sizes[-2]:
            last_sum, last_size = sums.pop(), sizes.pop()
            sums[-1] += last_sum
            sizes[-1] += last_size
    return np.repeat(np.array(sums) / np.array(sizes), sizes)


def noisy_isotonic_cdf(counts: Sequence[int], epsilon: float) -> npt.NDArray[np.float64]:
    """The same noisy counts, cumulated without clamping, over the public n, clipped to
    [0, 1] and made monotone by isotonic regression; the last point is 1 (n is public)."""
    per_point = np.diff(np.asarray(counts, dtype=np.int64), prepend=0)
    noisy = per_point + discrete_laplace(2 / epsilon, per_point.size)
    n = max(counts[-1], 1)
    fitted = isotonic(np.clip(np.cumsum(noisy) / n, 0.0, 1.0))
    fitted[-1] = 1.0
    return fitted


@dataclass
class Timing:
    label: str
    seconds: float
    counts: int
    blocks: int


def time_release(counts: list[int], k: int, epsilon: float, repeats: int) -> Timing:
    """Median seconds of full releases (planning and drawing), and the plan's size."""
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        sample_ks_synthetic(counts, k=k, epsilon=epsilon, relation="replace")
        seconds.append(time.perf_counter() - start)
    sampler = Sampler(counts, KSMechanism(k=k, epsilon=epsilon, relation="replace"))  # type: ignore[arg-type]
    return Timing("", statistics.median(seconds), sampler.band_counts, len(sampler.blocks))


def speed(repeats: int, quick: bool) -> None:
    m, k, n = (QUICK_M, 10, 10**4) if quick else (1000, 100, 10**6)
    counts = cumulative_counts(lognormal(np.random.default_rng(0), n), m)
    print(f"\n## Speed (m = {m:,}, k = {k}, n = {n:,}, epsilon = 1, replace, lognormal)\n")
    print("| k | seconds per release (median) | band counts | blocks | target |")
    print("|---|---|---|---|---|")
    for chosen in (k, ks_suggested_k(m, epsilon=1.0, n=n)):
        t = time_release(counts, chosen, 1.0, repeats)
        verdict = "PASS" if t.seconds <= TARGET_SECONDS else "FAIL"
        print(f"| {chosen} | {t.seconds:.3f} | {t.counts} | {t.blocks} | {verdict} (<= 5 s) |")


def scaling(repeats: int, quick: bool) -> None:
    base_m, base_k, base_n = (QUICK_M, 10, 10**4) if quick else (1000, 100, 10**6)
    rng = np.random.default_rng(1)
    data = lognormal(rng, base_n)
    rows: list[tuple[str, str, Timing]] = []
    ms = [base_m] if quick else [250, 500, 1000, 2000, 4000]
    ks = [base_k] if quick else [25, 50, 100, 200, 400]
    epsilons = [1.0] if quick else [0.1, 0.3, 1.0, 3.0, 10.0]
    ns = [base_n] if quick else [10**3, 10**4, 10**5, 10**6]
    for m in ms:
        rows.append(("m", f"{m:,}", time_release(cumulative_counts(data, m), base_k, 1.0, repeats)))
    counts = cumulative_counts(data, base_m)
    for k in ks:
        rows.append(("k", str(k), time_release(counts, k, 1.0, repeats)))
    for epsilon in epsilons:
        rows.append(("epsilon", str(epsilon), time_release(counts, base_k, epsilon, repeats)))
    for n in ns:
        sample = cumulative_counts(lognormal(rng, n), base_m)
        rows.append(("n", f"{n:,}", time_release(sample, base_k, 1.0, repeats)))
    print(f"\n## Scaling (others at m = {base_m:,}, k = {base_k}, n = {base_n:,}, epsilon = 1)\n")
    print("| varied | value | seconds per release | band counts | blocks |")
    print("|---|---|---|---|---|")
    for name, value, t in rows:
        print(f"| {name} | {value} | {t.seconds:.3f} | {t.counts} | {t.blocks} |")


def _slope(ns: Sequence[int], errors: Sequence[float]) -> float:
    x = np.log(np.asarray(ns, dtype=np.float64))
    y = np.log(np.asarray(errors, dtype=np.float64))
    return float(np.polyfit(x, y, 1)[0])


QUANTILE_DEPTHS = range(1, 11)  # Q = 2**h - 1 quantiles, 1 ... 1023


def quantile_count(m: int, n: int, epsilon: float) -> int:
    """The number of quantiles Q = 2**h - 1 that minimises a public error bound of the
    quantile-based CDF: ``1 / (2 (Q + 1))`` (reading between released levels) plus the plan's
    95% rank-error bound over n (public parameters only, as ``ks_suggested_k`` does for k)."""
    best_q, best = 1, float("inf")
    for h in QUANTILE_DEPTHS:
        q = 2**h - 1
        if q >= m:
            break
        plan = plan_quantiles(
            [Fraction(j, q + 1) for j in range(1, q + 1)],
            epsilon=epsilon,
            num_candidates=m,
            relation="replace",
            split="recursive",
        )
        bound = 1 / (2 * (q + 1)) + plan.rank_error / n
        if bound < best:
            best_q, best = q, bound
    return best_q


def quantiles_cdf(
    slots: npt.NDArray[np.int64], q: int, epsilon: float, grid: Grid
) -> npt.NDArray[np.float64]:
    """Our recursive quantiles (``beam_dp.summaries.quantiles``) on the grid histogram's slot
    counts at levels j / (Q + 1), read as a CDF: between the j-th and (j+1)-th released points
    the CDF is in [j / (Q + 1), (j + 1) / (Q + 1)], so it is read as the middle of that range;
    the last grid point is 1."""
    plan = plan_quantiles(
        [Fraction(j, q + 1) for j in range(1, q + 1)],
        epsilon=epsilon,
        num_candidates=grid.num_points,
        relation="replace",
        split="recursive",
    )
    released = np.asarray(select_quantiles(slots, grid, plan).indices)
    below = np.searchsorted(np.sort(released), np.arange(grid.num_points), side="right")
    cdf = (2 * below + 1) / (2 * (q + 1))
    cdf[-1] = 1.0
    return np.asarray(cdf, dtype=np.float64)


def snapped_slots(counts: Sequence[int], grid: Grid) -> npt.NDArray[np.int64]:
    """Slot counts with every value on a grid point (the snapped data the KS mechanism sees)."""
    slots = np.zeros(grid.num_slots, dtype=np.int64)
    slots[1::2] = np.diff(np.asarray(counts, dtype=np.int64), prepend=0)
    return slots


class OpenDPTree:
    """OpenDP's b-ary tree CDF (``make_b_ary_tree >> then_laplace``, then the
    ``make_consistent_b_ary_tree`` and ``make_cdf`` postprocessors) on the per-point counts,
    calibrated by OpenDP to epsilon at L1 input distance 2 (``replace``)."""

    def __init__(self, m: int, epsilon: float):
        import opendp.prelude as dp  # the peer is optional

        dp.enable_features("contrib")
        self.b = int(dp.t.choose_branching_factor(size_guess=m))
        domain = dp.vector_domain(dp.atom_domain(T=int))

        def measurement(scale: float) -> Any:
            tree = dp.t.make_b_ary_tree(
                domain, dp.l1_distance(T=int), leaf_count=m, branching_factor=self.b
            )
            return tree >> dp.m.then_laplace(scale=scale)

        scale = dp.binary_search_param(measurement, d_in=2, d_out=epsilon)
        self.measurement = measurement(scale)
        self.consistent = dp.t.make_consistent_b_ary_tree(branching_factor=self.b)
        self.to_cdf = dp.t.make_cdf()

    def cdf(self, counts: Sequence[int]) -> npt.NDArray[np.float64]:
        per_point = np.diff(np.asarray(counts, dtype=np.int64), prepend=0)
        leaves = self.consistent(self.measurement(per_point.tolist()))
        return np.asarray(self.to_cdf(leaves), dtype=np.float64)


def opendp_tree(m: int, epsilon: float) -> OpenDPTree | None:
    try:
        return OpenDPTree(m, epsilon)
    except ImportError:
        return None


METHODS = ("ks", "histogram", "isotonic", "quantiles", "opendp_tree")
HEADERS = {
    "ks": "KS mechanism",
    "histogram": "noisy histogram (clamped)",
    "isotonic": "noisy histogram (isotonic)",
    "quantiles": "recursive quantiles",
    "opendp_tree": "OpenDP b-ary tree",
}


def utility(runs: int, max_exponent: int, grids: Sequence[int], quick: bool) -> None:
    epsilon = 1.0
    ns = [10**e for e in range(3, max_exponent + 1)]
    print(f"\n## Utility (KS at the grid points, epsilon = 1, replace, {runs} runs)\n")
    slopes: dict[tuple[str, int], dict[str, float]] = {}
    for m in [QUICK_M] if quick else grids:
        tree = opendp_tree(m, epsilon)
        if tree is None:
            print(f"(OpenDP not importable: its b-ary tree is skipped at m = {m:,})\n")
        grid = Grid.uniform(LOWER, UPPER, m)
        print(
            "| data | m | n | k | Q | "
            + " | ".join(HEADERS[name] for name in METHODS)
            + " | KS 95% bound | KS rank |"
        )
        print("|---|---|---|---|---|" + "---|" * len(METHODS) + "---|---|")
        for name, generate in DISTRIBUTIONS.items():
            by_n: dict[str, list[float]] = {method: [] for method in METHODS}
            for n in ns:
                k = ks_suggested_k(m, epsilon=epsilon, n=n)
                q = quantile_count(m, n, epsilon)
                errors: dict[str, list[float]] = {method: [] for method in METHODS}
                for run in range(runs):
                    values = generate(np.random.default_rng(1000 * run + n), n)
                    slots = grid.histogram(values).counts()
                    counts = list(cumulative_counts_from_slots(slots))
                    released = {
                        "ks": ks_release_cdf(counts, k, epsilon),
                        "histogram": noisy_histogram_cdf(counts, epsilon),
                        "isotonic": noisy_isotonic_cdf(counts, epsilon),
                        "quantiles": quantiles_cdf(slots, q, epsilon, grid),
                    }
                    if tree is not None:
                        released["opendp_tree"] = tree.cdf(counts)
                    for method, cdf in released.items():
                        errors[method].append(ks_at_grid(counts, cdf))
                means = {
                    method: statistics.fmean(errors[method]) if errors[method] else math.nan
                    for method in METHODS
                }
                for method in METHODS:
                    by_n[method].append(means[method])
                bound = ks_accuracy_bound(m, k, epsilon=epsilon, n=n)
                rank = 1 + sum(means[other] < means["ks"] for other in METHODS[1:])
                cells = " | ".join(f"{means[method]:.2e}" for method in METHODS)
                print(f"| {name} | {m:,} | {n:,} | {k} | {q} | {cells} | {bound:.2e} | {rank} |")
            if len(ns) >= 2:
                slopes[(name, m)] = {
                    method: _slope(ns, by_n[method])
                    if not math.isnan(by_n[method][0])
                    else math.nan
                    for method in METHODS
                }
        print()
    if slopes:
        print(
            "| data | m | slope of log KS in log n: "
            + " | ".join(HEADERS[name] for name in METHODS)
            + " | seed |"
        )
        print("|---|---|" + "---|" * len(METHODS) + "---|")
        for (name, m), fitted in slopes.items():
            cells = " | ".join(f"{fitted[method]:.3f}" for method in METHODS)
            print(f"| {name} | {m:,} | {cells} | -0.333 |")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--only", choices=["speed", "scaling", "utility"])
    parser.add_argument("--repeats", type=int, default=3, help="releases timed per cell")
    parser.add_argument("--runs", type=int, default=5, help="datasets per utility cell")
    parser.add_argument("--max-exponent", type=int, default=6, help="largest n is 10**this")
    parser.add_argument(
        "--grids", default="1000,100000", help="grid sizes of the utility section (m,m,...)"
    )
    args = parser.parse_args(argv)
    repeats = 1 if args.quick else args.repeats
    runs = 2 if args.quick else args.runs
    max_exponent = 4 if args.quick else args.max_exponent
    if args.only in (None, "speed"):
        speed(repeats, args.quick)
    if args.only in (None, "scaling"):
        scaling(repeats, args.quick)
    if args.only in (None, "utility"):
        grids = [int(g) for g in args.grids.split(",")]
        utility(runs, max_exponent, grids, args.quick)


if __name__ == "__main__":
    main()
