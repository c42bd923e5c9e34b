"""Wall time of exact private selection (issue 2), against OpenDP's noisy max on the same scores.

Run from the repository root::

    python -m benchmarks.selection            # d = 10^4, 10^5, 10^6 (a few minutes)
    python -m benchmarks.selection --quick    # tiny d, one repeat (used by the smoke test)

For each number of candidates ``d`` and each score shape, it times ``select`` with
permute-and-flip (PF) and the exponential mechanism (EM) at epsilon = 1, sensitivity 1, not
monotone, randomness from the OS CSPRNG (``rng=None``, the production path). OpenDP's
``make_noisy_max`` runs on the same integer scores when ``opendp`` is importable: exponential
noise under ``max_divergence`` is PF, Gumbel noise under ``zero_concentrated_divergence`` is EM,
and ``scale = 2 * sensitivity / epsilon`` makes either one epsilon-DP for non-monotone scores
(checked against OpenDP's own privacy map before timing). OpenDP is timed twice: on a numpy
int64 array (its fast path: no per-element conversion) and on a Python list (the form of its
documentation examples, where converting the list dominates).

The script prints a Markdown table and PASS/FAIL against the issue's targets; it never fails.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import numpy as np

from beam_dp.mechanisms import select

EPSILON = 1.0
SENSITIVITY = 1
SEED = 20240601

# Issue 2 targets on a 2-core machine: seconds per selection, whatever the method.
TARGET_SECONDS = {10**4: 0.025, 10**5: 0.150, 10**6: 1.5}
# Repeats per d: OpenDP's time varies up to 10x between calls (its exact samplers do a random
# amount of work), so take the median of several; the full run takes a few minutes.
FULL_REPEATS = {10**4: 9, 10**5: 7, 10**6: 5}
QUICK_D = 1_000

METHODS = {"PF": "permute_and_flip", "EM": "exponential"}

# Quantile shape: values from a lognormal, candidates a uniform grid over public bounds.
NUM_VALUES = 10**6
QUICK_NUM_VALUES = 10**4
GRID_LOWER, GRID_UPPER = 0.0, 20.0


def count_scores(d: int, seed: int = SEED) -> np.ndarray:
    """Random non-negative integer scores, shaped like per-candidate counts in [0, 10^4)."""
    return np.random.default_rng(seed).integers(0, 10**4, size=d, dtype=np.int64)


def median_utilities(values: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Integer median utilities ``-|L - G|`` of sorted ``grid`` candidates for ``values``.

    ``L[j] = #(x < grid[j])`` and ``G[j] = #(x > grid[j])`` come from two histograms of the
    values over the grid and a cumulative sum, as the library's summaries do.

    Why integers with sensitivity 1: the quantile utility for alpha = 1/2 is
    ``-|(1 - alpha) L - alpha G| = -|L - G| / 2``. Under add/remove one record moves either L or
    G by one (or neither), so that real score has sensitivity ``max(alpha, 1 - alpha) = 1/2``.
    The mechanisms depend only on ``epsilon * score / sensitivity``; multiplying every score and
    the sensitivity by 2 changes nothing, so ``-|L - G|`` with sensitivity 1 is the same
    mechanism, and its scores are exact integers.
    """
    d = grid.size
    # x < grid[j]  <=>  #(grid <= x) <= j ;  x > grid[j]  <=>  #(grid < x) > j.
    at_most = np.bincount(np.searchsorted(grid, values, side="right"), minlength=d + 1)
    below = np.bincount(np.searchsorted(grid, values, side="left"), minlength=d + 1)
    less = np.cumsum(at_most)[:d]
    greater = values.size - np.cumsum(below)[:d]
    return -np.abs(less - greater).astype(np.int64)


def median_scores(d: int, num_values: int = NUM_VALUES, seed: int = SEED) -> np.ndarray:
    """Median utilities of lognormal values clamped to a uniform grid of ``d`` candidates."""
    rng = np.random.default_rng(seed)
    values = np.clip(rng.lognormal(mean=0.0, sigma=1.0, size=num_values), GRID_LOWER, GRID_UPPER)
    return median_utilities(values, np.linspace(GRID_LOWER, GRID_UPPER, d))


@dataclass
class Row:
    """One (score shape, d, method) measurement; times are medians in seconds."""

    shape: str
    d: int
    method: str
    repeats: int
    ours: float
    opendp_array: float | None = None
    opendp_list: float | None = None

    @property
    def opendp_best(self) -> float | None:
        times = [t for t in (self.opendp_array, self.opendp_list) if t is not None]
        return min(times) if times else None


def median_seconds(call: Callable[[], object], repeats: int) -> float:
    """Median wall time of ``call`` over ``repeats`` runs, after one untimed warm-up."""
    call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def opendp_selectors() -> dict[str, Any] | None:
    """OpenDP noisy-max measurements equivalent to PF and EM, or None if OpenDP is missing."""
    try:
        import opendp.prelude as dp
    except ImportError:
        return None
    dp.enable_features("contrib")
    space = dp.vector_domain(dp.atom_domain(T="i64")), dp.linf_distance(T="i64", monotonic=False)
    scale = 2 * SENSITIVITY / EPSILON
    measures = {"PF": dp.max_divergence(), "EM": dp.zero_concentrated_divergence()}
    selectors = {name: dp.m.make_noisy_max(*space, m, scale=scale) for name, m in measures.items()}
    # Pure epsilon for exponential noise; rho = epsilon^2 / 8 for Gumbel noise (that is EM).
    expected = {"PF": EPSILON, "EM": EPSILON**2 / 8}
    for name, selector in selectors.items():
        spent = selector.map(SENSITIVITY)
        if not np.isclose(spent, expected[name]):
            raise RuntimeError(f"OpenDP {name} spends {spent}, expected {expected[name]}")
    return selectors


def machine_summary() -> list[str]:
    """Lines describing this machine and the versions that matter to the timings."""
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        opendp_version = metadata.version("opendp")
    except metadata.PackageNotFoundError:
        opendp_version = "not installed"
    return [
        f"- cores: {os.cpu_count()}; CPU: {cpu}",
        f"- Python {platform.python_version()}, numpy {np.__version__}, opendp {opendp_version}",
        f"- epsilon = {EPSILON}, sensitivity = {SENSITIVITY}, not monotone, rng = OS CSPRNG",
    ]


def run(
    sizes: Sequence[int], repeats: dict[int, int], num_values: int, use_opendp: bool
) -> list[Row]:
    """Time every (d, shape, method) and return the rows (also printed as they finish)."""
    selectors = opendp_selectors() if use_opendp else None
    if use_opendp and selectors is None:
        print("OpenDP is not importable: skipping it (pip install opendp==0.16.0).")
    rows = []
    for d in sizes:
        shapes = {"counts": count_scores(d), "median": median_scores(d, num_values)}
        for shape, scores in shapes.items():
            as_list = scores.tolist()
            for name, method in METHODS.items():
                n = repeats.get(d, 1)

                def ours(scores: np.ndarray = scores, method: str = method) -> int:
                    chosen = select(scores, epsilon=EPSILON, sensitivity=SENSITIVITY, method=method)
                    if not 0 <= chosen < scores.size:
                        raise RuntimeError(f"select returned {chosen} for d = {scores.size}")
                    return chosen

                row = Row(shape, d, name, n, median_seconds(ours, n))
                if selectors is not None:
                    selector = selectors[name]
                    row.opendp_array = median_seconds(lambda s=selector, x=scores: s(x), n)
                    row.opendp_list = median_seconds(lambda s=selector, x=as_list: s(x), n)
                print(f"  done: {shape:6s} d={d:>9,d} {name}: ours {row.ours * 1e3:9.2f} ms")
                rows.append(row)
    return rows


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1e3:,.1f}"


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def format_table(rows: Sequence[Row]) -> str:
    """The Markdown table: median ms per call, OpenDP/ours ratio and the targets."""
    lines = [
        "| scores | d | method | repeats | ours (ms) | OpenDP array (ms) | OpenDP list (ms) "
        "| OpenDP/ours | target (ms) | ≤ target | faster than OpenDP |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for row in rows:
        target = TARGET_SECONDS.get(row.d)
        best = row.opendp_best
        ratio = "n/a" if best is None else f"{best / row.ours:.2f}"
        within = "n/a" if target is None else _verdict(row.ours <= target)
        faster = "n/a" if best is None else _verdict(row.ours < best)
        lines.append(
            f"| {row.shape} | {row.d:,d} | {row.method} | {row.repeats} | {_ms(row.ours)} "
            f"| {_ms(row.opendp_array)} | {_ms(row.opendp_list)} | {ratio} "
            f"| {_ms(target)} | {within} | {faster} |"
        )
    return "\n".join(lines)


def verdicts(rows: Sequence[Row]) -> list[str]:
    """One PASS/FAIL line per target and row (faster than OpenDP: its faster input path)."""
    out = []
    for row in rows:
        label = f"{row.method} {row.shape} d={row.d:,d}"
        target = TARGET_SECONDS.get(row.d)
        if target is not None:
            out.append(f"{_verdict(row.ours <= target)}: {label} ≤ {_ms(target)} ms")
        if row.opendp_best is not None:
            out.append(f"{_verdict(row.ours < row.opendp_best)}: {label} faster than OpenDP")
    return out


def main(argv: Sequence[str] | None = None) -> list[Row]:
    """Parse arguments, run the benchmark, print the table and verdicts; return the rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"d = {QUICK_D:,d}, one repeat")
    parser.add_argument("--no-opendp", action="store_true", help="do not time OpenDP")
    args = parser.parse_args(argv)
    if args.quick:
        sizes, repeats, num_values = [QUICK_D], {QUICK_D: 1}, QUICK_NUM_VALUES
    else:
        sizes, repeats, num_values = list(FULL_REPEATS), FULL_REPEATS, NUM_VALUES
    print("Exact private selection: median wall time per call")
    print("\n".join(machine_summary()))
    rows = run(sizes, repeats, num_values, use_opendp=not args.no_opendp)
    print()
    print(format_table(rows))
    print()
    print("\n".join(verdicts(rows)))
    return rows


if __name__ == "__main__":
    main()
