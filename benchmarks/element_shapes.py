"""Per-record input against Beam's own per-record pipeline, in the same run (issue 24).

Run from the repository root::

    python -m benchmarks.element_shapes              # 10^6 records
    python -m benchmarks.element_shapes --quick      # 2*10^4 records, one repeat (smoke test)

One Parquet file (``user_id`` int64, ~10 rows per person; ``site`` one of 100 public labels;
``seconds`` a float), written to a temporary folder. Four pipelines on the in-process
FnApiRunner (the DirectRunner's), each run ``--repeats`` times, best and median wall and CPU
seconds (CPU: this process, where the FnApiRunner's one worker runs):

* ``ReadFromParquet | Count.Globally()``: Beam's own per-record pipeline (one dict per
  record): the baseline the issue names.
* ``ReadFromParquet | TopCandidates.Globally(unit_column=...)``: the same dicts, batched inside
  the transform (``BatchRecordsFn``), bounded per person and released.
* ``ReadFromParquetBatched | Count of rows``: Beam's batched read, the batched baseline.
* ``ReadFromParquetBatched | TopCandidates.Globally(unit_column=...)``: the batched input.

It prints the ratios (per-record release / per-record count; batched release / batched
count) and the issue's target (per-record at most 1.5 times Beam's own), judged by CPU seconds
(the fair measure on a shared machine) and by wall seconds. It never fails.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.parquetio import ReadFromParquet, ReadFromParquetBatched
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from beam_dp.beam.selection import TopCandidates

SITES = [f"site-{i:03d}" for i in range(100)]
TARGET_RATIO = 1.5


def write_data(path: Path, rows: int, seed: int = 24) -> None:
    rng = np.random.default_rng(seed)
    table = pa.table(
        {
            "user_id": rng.integers(0, max(1, rows // 10), rows),
            "site": pa.array(np.array(SITES)[rng.integers(0, len(SITES), rows)]),
            "seconds": rng.random(rows) * 100,
        }
    )
    pq.write_table(table, path, row_group_size=1 << 17)


def _release() -> beam.PTransform:
    return TopCandidates.Globally(
        candidate_column="site", candidates=SITES, unit_column="user_id", epsilon=1.0
    )


def pipelines(path: str) -> dict[str, Callable[[beam.Pipeline], Any]]:
    return {
        "records: ReadFromParquet | Count.Globally": lambda p: (
            p | ReadFromParquet(path) | beam.combiners.Count.Globally()
        ),
        "records: ReadFromParquet | TopCandidates": lambda p: (
            p | ReadFromParquet(path) | _release()
        ),
        "batches: ReadFromParquetBatched | row count": lambda p: (
            p
            | ReadFromParquetBatched(path)
            | beam.Map(lambda t: t.num_rows)
            | beam.CombineGlobally(sum)
        ),
        "batches: ReadFromParquetBatched | TopCandidates": lambda p: (
            p | ReadFromParquetBatched(path) | _release()
        ),
    }


def measure(build: Callable[[beam.Pipeline], Any]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        build(pipeline)
    return time.perf_counter() - wall, time.process_time() - cpu


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="2*10^4 rows, one repeat")
    args = parser.parse_args(argv)
    rows, repeats = (20_000, 1) if args.quick else (args.rows, args.repeats)
    print(
        f"{rows:,} records; {repeats} repeat(s); {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs"
    )
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "visits.parquet"
        write_data(path, rows)
        figures: dict[str, list[tuple[float, float]]] = {}
        for _ in range(repeats):  # interleaved: a shared machine's noise falls on every line
            for name, build in pipelines(str(path)).items():
                figures.setdefault(name, []).append(measure(build))
    best = {}
    print(f"{'pipeline':52} {'wall best':>9} {'wall med':>9} {'CPU best':>9} {'CPU med':>9}")
    for name, runs in figures.items():
        walls, cpus = [w for w, _ in runs], [c for _, c in runs]
        best[name] = (min(walls), min(cpus))
        print(
            f"{name:52} {min(walls):9.2f} {statistics.median(walls):9.2f} "
            f"{min(cpus):9.2f} {statistics.median(cpus):9.2f}"
        )
    names = list(figures)
    for release, baseline in ((names[1], names[0]), (names[3], names[2])):
        wall = best[release][0] / best[baseline][0]
        cpu = best[release][1] / best[baseline][1]
        print(f"{release} / {baseline}: wall {wall:.2f}x, CPU {cpu:.2f}x")
    for measure_name, at in (("CPU", 1), ("wall", 0)):
        ratio = best[names[1]][at] / best[names[0]][at]
        verdict = "PASS" if ratio <= TARGET_RATIO else "FAIL"
        print(
            f"target: per-record release <= {TARGET_RATIO}x Beam's per-record count "
            f"({measure_name}): {ratio:.2f}x {verdict}"
        )


if __name__ == "__main__":
    main()
