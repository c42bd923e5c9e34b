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

Run: ``.venv/bin/python -m benchmarks.multiq [--releases 20] [--tie-parts 64]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np
import numpy.typing as npt

from beam_dp.summaries.histogram import Grid, GridHistogram
from beam_dp.summaries.quantiles import plan_quantiles, select_quantiles

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--releases", type=int, default=20)
    parser.add_argument("--tie-parts", type=int, default=None)
    parser.add_argument("--m", type=int, nargs="*", default=[10, 50, 100, 200])
    args = parser.parse_args()
    values = dominant_tie()
    print("| m | Q | max error | mean max error | stated | over stated | s / release | CPU s |")
    print("|---|---|---|---|---|---|---|---|")
    for m in args.m:
        print(run(m, args.releases, args.tie_parts, values), flush=True)


if __name__ == "__main__":
    main()
