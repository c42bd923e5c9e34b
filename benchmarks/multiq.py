"""Many quantiles on a column with a dominant tie block: max rank error and time per release.

Issue 39 (items 1-2): an integer column in [0, 100] with 47% of its rows on one value (590 000
rows, a 101-point integer grid, epsilon 1 add/remove), m evenly spaced quantiles. For each m,
``--releases`` default releases (OS CSPRNG) report the tie-aware rank error (the distance from
``floor(alpha N)`` to the released value's rank range, max over the quantiles, then the max and
mean over releases), how many releases exceeded the stated bound (``rank_error_beyond_best_
grid_point + rank_error_share_of_n * N``) and the time per release (the selection alone, from
the merged histogram; wall and CPU seconds: CPU is the figure on a shared machine).

``--tie-parts Q`` replays the release with ``Q`` parts per tie block instead of the plan's
(its stated bound is then the plan's own, made for the plan's ``Q``: not a statement). For the
figures before issue 39, run this file against that commit's package (it reads no share there).

**Anchors** (issue 39, last item; ``## Against the anchors``): the same tie column, a
continuous one (N(50, 15) clipped to [0, 100], full float precision) and a bimodal one (half
N(25, 5), half N(75, 5), clipped), ``--anchor-rows`` rows each (the tie column keeps its
590 000), at each ``m`` and each ``--epsilons``: the ``m`` quantiles are ``m`` evenly strided
ones of the 250 levels ``i / 251``. beam-dp runs its default (``plan_quantiles`` as above,
add/remove) on the 101-point integer grid for the tie column and on a ``2^--grid-bits + 1``
point grid over [0, 100] for the others (its error includes the grid's step); the anchors
(``benchmarks/anchors_quantiles.py``: Kaplan-Schnapp-Stemmer's ApproxQuantiles and our
reconstruction of Imola et al.'s slicing by continual counting; the swap relation, ``n``
public) release real numbers, rounded to integers on the tie column after spreading its ties.
Errors are tie-aware (as above): per release the max over the quantiles, then the max and the
mean over releases, and the mean over every quantile and release; ``ratio`` is beam-dp's max
over the best anchor's max. CPU seconds per release (the selection from the merged histogram
for beam-dp, the whole anchor from the sorted column).

Run: ``.venv/bin/python -m benchmarks.multiq [--releases 20] [--tie-parts 64] [--quick]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np
import numpy.typing as npt

from beam_dp.summaries.histogram import MAX_GRID_POINTS, Grid, GridHistogram
from beam_dp.summaries.quantiles import plan_quantiles, select_quantiles
from benchmarks.anchors_quantiles import kaplan_quantiles, slice_quantiles, spread_ties

GRID = Grid.uniform(0.0, 100.0, 101)


def dominant_tie(rows: int = 590_000, start: float = 0.2) -> npt.NDArray[np.float64]:
    """47% of the rows on 40, from rank ``start * rows``; the rest spread evenly."""
    block, below = int(0.47 * rows), int(start * rows)
    above = rows - block - below
    counts = np.zeros(101, dtype=np.int64)
    counts[:40] = below // 40
    counts[: below % 40] += 1
    counts[41:] = above // 60
    counts[41 : 41 + above % 60] += 1
    counts[40] = block
    return np.repeat(np.arange(101.0), counts)


def tie_aware_error(values: npt.NDArray[np.float64], alpha: float, released: float) -> float:
    below = int(np.searchsorted(values, released, side="left"))
    at_or_below = int(np.searchsorted(values, released, side="right"))
    target = float(np.floor(alpha * values.size))
    return max(0.0, below - target, target - at_or_below)


def run(m: int, releases: int, tie_parts: int | None, values: npt.NDArray[np.float64]) -> str:
    quantiles = [i / (m + 1) for i in range(1, m + 1)]
    plan = plan_quantiles(quantiles, epsilon=1.0, num_candidates=GRID.num_points)
    if tie_parts is not None:
        plan = dataclasses.replace(plan, tie_parts=tie_parts)
    histogram = GridHistogram(GRID.num_slots)
    histogram.add_slots(GRID.slots(values))
    worst: list[float] = []
    exceeded = 0
    seconds = cpu = 0.0
    for _ in range(releases):
        start, start_cpu = time.perf_counter(), time.process_time()
        selection = select_quantiles(histogram, GRID, plan)
        seconds += time.perf_counter() - start
        cpu += time.process_time() - start_cpu
        errors = [
            tie_aware_error(values, q, v) for q, v in zip(quantiles, selection.values, strict=True)
        ]
        # (getattr: the same script measures the code before issue 39, which had no share)
        share = float(getattr(selection, "rank_error_share", 0.0))
        stated = selection.rank_error + share * values.size
        exceeded += max(errors) > stated
        worst.append(max(errors))
    share = float(getattr(plan, "rank_error_share", 0.0))
    stated = plan.rank_error + share * values.size
    return (
        f"| {m} | {plan.tie_parts} | {max(worst):.0f} | {np.mean(worst):.1f} | "
        f"{stated:.0f} ({plan.rank_error:.0f} + {share:.2g} N) | "
        f"{exceeded}/{releases} | {seconds / releases:.3f} | {cpu / releases:.3f} |"
    )


LEVELS = 250  # the anchors' table draws its m quantiles from the levels i / (LEVELS + 1)


def continuous(rows: int, rng: np.random.Generator) -> npt.NDArray[np.float64]:
    return np.sort(np.clip(rng.normal(50.0, 15.0, rows), 0.0, 100.0))


def bimodal(rows: int, rng: np.random.Generator) -> npt.NDArray[np.float64]:
    modes = np.where(rng.random(rows) < 0.5, 25.0, 75.0)
    return np.sort(np.clip(rng.normal(modes, 5.0), 0.0, 100.0))


def strided_levels(m: int) -> list[float]:
    """``m`` evenly strided levels among ``i / (LEVELS + 1)``, ``i = 1..LEVELS``."""
    indices = np.floor((np.arange(m) + 0.5) * LEVELS / m).astype(int) + 1
    return [int(i) / (LEVELS + 1) for i in indices]


@dataclasses.dataclass(frozen=True)
class Column:
    name: str
    values: npt.NDArray[np.float64]  # sorted
    grid: Grid
    integer: bool


@dataclasses.dataclass(frozen=True)
class Cell:
    worst: float
    mean_worst: float
    mean: float
    cpu_seconds: float


def measure(
    column: Column, method: str, m: int, epsilon: float, releases: int, histogram: GridHistogram
) -> Cell:
    quantiles = strided_levels(m)
    rng = np.random.default_rng()
    anchor_values = spread_ties(column.values) if column.integer else column.values
    low, high = (-0.5, 100.5) if column.integer else (0.0, 100.0)
    plan = plan_quantiles(quantiles, epsilon=epsilon, num_candidates=column.grid.num_points)
    worst: list[float] = []
    every: list[float] = []
    cpu = 0.0
    for _ in range(releases):
        start = time.process_time()
        if method == "beam-dp":
            released = list(select_quantiles(histogram, column.grid, plan).values)
        else:
            anchor = kaplan_quantiles if method == "Kaplan et al." else slice_quantiles
            released = anchor(anchor_values, quantiles, epsilon, low, high, rng)
            if column.integer:
                released = [float(np.clip(np.round(v), 0.0, 100.0)) for v in released]
        cpu += time.process_time() - start
        pairs = zip(quantiles, released, strict=True)
        errors = [tie_aware_error(column.values, q, v) for q, v in pairs]
        worst.append(max(errors))
        every.extend(errors)
    return Cell(max(worst), float(np.mean(worst)), float(np.mean(every)), cpu / releases)


METHODS = ("beam-dp", "Kaplan et al.", "Imola et al. (ours)")


def anchors_table(
    columns: list[Column], ms: list[int], epsilons: list[float], releases: int
) -> list[tuple[str, float, int, float]]:
    """Print the table; return the cells where beam-dp's max error > 0.8x the best anchor's."""
    print("\n## Against the anchors\n")
    print("| column | ε | m | method | max error | mean max error | mean error | CPU s / release |")
    print("|---|---|---|---|---|---|---|---|")
    above: list[tuple[str, float, int, float]] = []
    for column in columns:
        histogram = GridHistogram(column.grid.num_slots)
        histogram.add_slots(column.grid.slots(column.values))
        for epsilon in epsilons:
            for m in ms:
                cells = {
                    method: measure(column, method, m, epsilon, releases, histogram)
                    for method in METHODS
                }
                for method, cell in cells.items():
                    print(
                        f"| {column.name} | {epsilon:g} | {m} | {method} | {cell.worst:.0f} | "
                        f"{cell.mean_worst:.1f} | {cell.mean:.1f} | {cell.cpu_seconds:.3f} |"
                    )
                best = min(cells[method].worst for method in METHODS[1:])
                ours = cells["beam-dp"].worst
                ratio = ours / best if best > 0 else (1.0 if ours == 0 else float("inf"))
                if ours > 0.8 * best:
                    above.append((column.name, epsilon, m, ratio))
                label = f"{ratio:.2f}" if best > 0 or ours > 0 else "(both 0)"
                print(f"| {column.name} | {epsilon:g} | {m} | ratio | {label} | | | |", flush=True)
    print("\nbeam-dp's max error > 0.8x the best anchor's:", above or "none")
    return above


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--releases", type=int, default=20)
    parser.add_argument("--tie-parts", type=int, default=None)
    parser.add_argument("--m", type=int, nargs="*", default=[10, 50, 100, 200])
    parser.add_argument("--epsilons", type=float, nargs="*", default=[0.5, 1.0, 5.0])
    parser.add_argument("--anchor-rows", type=int, default=300_000)
    parser.add_argument("--grid-bits", type=int, default=12)
    parser.add_argument("--quick", action="store_true", help="small data, 2 releases, m 10, 50")
    parser.add_argument(
        "--columns", nargs="*", default=["47% tie", "continuous", "bimodal"], help="which columns"
    )
    args = parser.parse_args(argv)
    tie_rows = 590_000
    if args.quick:
        args.releases, args.m, args.epsilons = 2, [10, 50], [1.0]
        args.anchor_rows, args.grid_bits, tie_rows = 20_000, 8, 20_000
    values = dominant_tie(tie_rows)
    print("## beam-dp's stated bound (tie column, ε 1)\n")
    print("| m | Q | max error | mean max error | stated | over stated | s / release | CPU s |")
    print("|---|---|---|---|---|---|---|---|")
    for m in args.m:
        print(run(m, args.releases, args.tie_parts, values), flush=True)
    rng = np.random.default_rng()
    fine = Grid.uniform(0.0, 100.0, min(2**args.grid_bits + 1, MAX_GRID_POINTS))
    columns = [
        Column("47% tie", values, GRID, integer=True),
        Column("continuous", continuous(args.anchor_rows, rng), fine, integer=False),
        Column("bimodal", bimodal(args.anchor_rows, rng), fine, integer=False),
    ]
    columns = [column for column in columns if column.name in args.columns]
    anchors_table(columns, args.m, args.epsilons, args.releases)


if __name__ == "__main__":
    main()
