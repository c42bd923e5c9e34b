"""Many small selections and large candidate grids (issue 13), against OpenDP in the same run.

Run from the repository root::

    python -m benchmarks.many_keys            # 10^5 keys, 10^6-price grid (a few minutes)
    python -m benchmarks.many_keys --quick    # small sizes, one repeat (the smoke test)

It prints, with medians of repeats (the machine may be shared: medians, not minima):

* **per key**: microseconds per key of ``select_per_key`` over 10^5 keys with d = 2, 5, 10,
  100 candidates each (scores uniform integers in [0, 20), epsilon = 1, sensitivity 1, not
  monotone, OS CSPRNG), for permute-and-flip (PF) and the exponential mechanism (EM); the same
  per key when ``select`` is called once per key ("before", on a sample of keys); and OpenDP's
  ``make_noisy_max`` called once per key (PF: exponential noise under ``max_divergence``; EM:
  Gumbel noise under ``zero_concentrated_divergence``; ``scale = 2 / epsilon``, checked against
  its privacy map);
* **single call**: microseconds per ``select`` call at d = 2, 10, 100;
* **grid**: seconds to score and select among 10^6 prices in one process: reading the grid
  (``Revenue`` of 10^6 floats, $0.01 ... $10,000.00), scoring 10^6 willingness-to-pay values
  (``Revenue.compute``) and one exact PF selection (monotone, sensitivity max price), and
  OpenDP's noisy max on the same integer scores;
* with ``--job``: a whole ``TopCandidates.PerKey`` job over 10^5 keys (d = 2 and 10, PF and
  EM) on the DirectRunner, as seconds and microseconds per key beyond a 10^3-key job; and the
  whole ``pipelines.best_price`` process on a small Parquet file (the sample survey) with
  the default grid, the 10^6 grid and a refused 10^7 grid (naming the limit). ``--only-jobs``
  skips the in-process timings, ``--job-part`` picks one of the two.

The script never fails on a missed target; it prints PASS/FAIL lines.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np

from beam_dp.mechanisms import check_method, select
from beam_dp.mechanisms.per_key import select_per_key
from beam_dp.scores import Revenue
from benchmarks.selection import machine_summary

EPSILON = 1.0
SEED = 20261123
METHODS = {"PF": "permute_and_flip", "EM": "exponential"}
KEY_SIZES = (2, 5, 10, 100)
SINGLE_SIZES = (2, 10, 100)
TARGET_US_PER_KEY = 20.0  # at d <= 10
TARGET_GRID_SECONDS = 2.0
GRID_SPEC = "0.01:10000.01:0.01"  # 10^6 prices
REFUSED_SPEC = "0.01:100000:0.01"  # about 10^7 prices


def median_seconds(call: Callable[[], object], repeats: int) -> float:
    """Median wall time of ``call`` over ``repeats`` runs, after one untimed warm-up."""
    call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def opendp_noisy_max(monotonic: bool, sensitivity: int) -> dict[str, Any] | None:
    """OpenDP's PF and EM counterparts for integer scores, or None if OpenDP is missing."""
    try:
        import opendp.prelude as dp
    except ImportError:
        return None
    dp.enable_features("contrib")
    space = (
        dp.vector_domain(dp.atom_domain(T="i64")),
        dp.linf_distance(T="i64", monotonic=monotonic),
    )
    scale = (1 if monotonic else 2) * sensitivity / EPSILON
    measures = {"PF": dp.max_divergence(), "EM": dp.zero_concentrated_divergence()}
    selectors = {name: dp.m.make_noisy_max(*space, m, scale=scale) for name, m in measures.items()}
    expected = {"PF": EPSILON, "EM": EPSILON**2 / 8}
    for name, selector in selectors.items():
        spent = selector.map(sensitivity)
        if not np.isclose(spent, expected[name]):
            raise RuntimeError(f"OpenDP {name} spends {spent}, expected {expected[name]}")
    return selectors


def per_key_rows(
    num_keys: int, sample_keys: int, repeats: int, use_opendp: bool
) -> list[dict[str, Any]]:
    """Microseconds per key: batched, select per key (before), OpenDP per key."""
    selectors = opendp_noisy_max(monotonic=False, sensitivity=1) if use_opendp else None
    if use_opendp and selectors is None:
        print("OpenDP is not importable: skipping it (pip install opendp==0.16.0).")
    rng = np.random.default_rng(SEED)
    rows = []
    for d in KEY_SIZES:
        scores = rng.integers(0, 20, size=(num_keys, d), dtype=np.int64)
        sample = scores[:sample_keys]
        for name, method in METHODS.items():

            def batched(scores: np.ndarray = scores, method: str = method) -> None:
                chosen = select_per_key(scores, epsilon=EPSILON, sensitivity=1, method=method)  # type: ignore[arg-type]
                if chosen.shape != (scores.shape[0],) or int(chosen.max()) >= scores.shape[1]:
                    raise RuntimeError("select_per_key returned an index out of range")

            def one_by_one(sample: np.ndarray = sample, method: str = method) -> None:
                for row in sample:
                    select(row, epsilon=EPSILON, sensitivity=1, method=method)  # type: ignore[arg-type]

            ours = median_seconds(batched, repeats) / num_keys * 1e6
            before = median_seconds(one_by_one, 1) / sample_keys * 1e6
            row: dict[str, Any] = {"d": d, "method": name, "ours": ours, "before": before}
            if selectors is not None:
                selector = selectors[name]

                def opendp(sample: np.ndarray = sample, selector: Any = selector) -> None:
                    for key_scores in sample:
                        selector(key_scores)

                row["opendp"] = median_seconds(opendp, 1) / sample_keys * 1e6
            print(
                f"  done: d={d:>3d} {name}: {ours:7.2f} us/key batched, {before:7.1f} us/key "
                "one call per key"
            )
            rows.append(row)
    return rows


def single_call_rows(calls: int) -> list[dict[str, Any]]:
    """Median microseconds per ``select`` call (medians of 5 blocks of ``calls`` calls)."""
    rng = np.random.default_rng(SEED + 1)
    rows = []
    for d in SINGLE_SIZES:
        scores = rng.integers(0, 20, size=d, dtype=np.int64)
        for name, method in METHODS.items():

            def block(scores: np.ndarray = scores, method: str = method) -> None:
                for _ in range(calls):
                    select(scores, epsilon=EPSILON, sensitivity=1, method=method)  # type: ignore[arg-type]

            micro = median_seconds(block, 5) / calls * 1e6
            rows.append({"d": d, "method": name, "ours": micro})
    return rows


def grid_prices(spec: str) -> list[float]:
    """START:STOP:STEP as floats of exact decimals, as the jobs read ``--prices``."""
    start, stop, step = (Decimal(part) for part in spec.split(":"))
    count = int((stop - start) / step)
    return [float(start + i * step) for i in range(count) if start + i * step < stop]


def grid_row(
    num_prices_spec: str, num_values: int, repeats: int, use_opendp: bool
) -> dict[str, Any]:
    """Seconds to read a price grid, score it on ``num_values`` values and select once."""
    prices = grid_prices(num_prices_spec)
    values = np.random.default_rng(SEED + 2).lognormal(mean=3.0, sigma=1.5, size=num_values)
    parts: dict[str, float] = {}

    def release() -> int:
        start = time.perf_counter()
        score = Revenue(prices)
        parts["read grid"] = time.perf_counter() - start
        start = time.perf_counter()
        scores = score.compute(values)
        parts["score"] = time.perf_counter() - start
        start = time.perf_counter()
        chosen = select(scores, epsilon=EPSILON, sensitivity=score.sensitivity(), monotonic=True)
        parts["select"] = time.perf_counter() - start
        return chosen

    times = []
    splits = []
    release()
    for _ in range(repeats):
        start = time.perf_counter()
        release()
        times.append(time.perf_counter() - start)
        splits.append(dict(parts))
    middle = sorted(range(repeats), key=lambda i: times[i])[repeats // 2]
    row: dict[str, Any] = {"prices": len(prices), "values": num_values, "total": times[middle]}
    row.update(splits[middle])
    if use_opendp:
        score = Revenue(prices)
        scores = score.compute(values)
        selectors = opendp_noisy_max(monotonic=True, sensitivity=int(score.scaled_prices[-1]))
        if selectors is not None:
            selector = selectors["PF"]
            row["opendp select"] = median_seconds(lambda: selector(scores), repeats)
    return row


def survey_parquet(directory: Path) -> Path:
    """The sample survey (three Avro exports, 9,059 rows) as one small Parquet file."""
    import fastavro
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = Path(__file__).resolve().parent.parent
    rows: list[dict[str, Any]] = []
    for path in sorted((root / "sample_data/survey").glob("export-*.avro")):
        with open(path, "rb") as handle:
            rows.extend(fastavro.reader(handle))  # type: ignore[arg-type]
    target = directory / "survey.parquet"
    pq.write_table(pa.Table.from_pylist(rows), target)
    return target


def job_rows(python: str, repeats: int = 1) -> list[dict[str, Any]]:
    """The whole best_price process on a small Parquet input (the sample survey): the default
    grid, the 10^6 grid, a refused 10^7 grid; medians of ``repeats`` runs."""
    root = Path(__file__).resolve().parent.parent
    rows = []
    with tempfile.TemporaryDirectory() as out:
        data = survey_parquet(Path(out))
        for label, spec in (
            ("default grid (199 prices)", "0.01:2.00:0.01"),
            ("10^6 prices", GRID_SPEC),
            ("10^7 prices (refused)", REFUSED_SPEC),
        ):
            runs: list[dict[str, Any]] = []
            for run in range(repeats):
                command = [
                    python, "-m", "pipelines.best_price", "--input", str(data),
                    "--privacy_unit", "user_id", "--value", "willingness_to_pay",
                    "--prices", spec, "--epsilon", "1",
                    "--output", str(Path(out) / f"{label[:4]}-{run}"),
                ]  # fmt: skip
                start = time.perf_counter()
                done = subprocess.run(
                    command, cwd=root, capture_output=True, text=True, check=False
                )
                seconds = time.perf_counter() - start
                last = (done.stderr.strip().splitlines() or [""])[-1]
                runs.append({"seconds": seconds, "exit": done.returncode, "last": last})
            runs.sort(key=lambda r: float(r["seconds"]))
            rows.append({"job": label, **runs[len(runs) // 2]})
            print(
                f"  done: best_price {label}: {rows[-1]['seconds']:.2f} s, exit {done.returncode}"
            )
    return rows


JOB_KEYS = 100_000
JOB_SMALL_KEYS = 1_000
JOB_ROWS_PER_KEY = 4


def per_key_job_seconds(num_keys: int, d: int, method: str) -> float:
    """Wall seconds of one ``TopCandidates.PerKey`` job over ``num_keys`` public keys.

    Record-level privacy (nothing to bound: the job is encode, combine per key, select), d
    public candidates, ``JOB_ROWS_PER_KEY`` rows per key in batches of 50,000 rows, on the
    DirectRunner in this process; the releases are counted (one per key) and dropped.
    """
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.transforms.combiners import Count

    from beam_dp.beam.selection import TopCandidates

    rng = np.random.default_rng(SEED + 3)
    keys = [f"k{i:06d}" for i in range(num_keys)]
    candidates = [f"c{j}" for j in range(d)]
    rows = num_keys * JOB_ROWS_PER_KEY
    key_column = np.array(keys, dtype=object)[np.arange(rows) % num_keys]
    candidate_column = np.array(candidates, dtype=object)[rng.integers(0, d, size=rows)]
    batches = [
        {"key": key_column[start : start + 50_000], "c": candidate_column[start : start + 50_000]}
        for start in range(0, rows, 50_000)
    ]

    def check(count: int) -> None:  # Count.Globally outputs once, even for no release
        if count != num_keys:
            raise RuntimeError(f"{count} releases for {num_keys} keys")

    start = time.perf_counter()
    with beam.Pipeline(options=PipelineOptions(["--runner=DirectRunner"])) as pipeline:
        _ = (
            pipeline
            | beam.Create(batches, reshuffle=False)  # type: ignore[no-untyped-call]
            | TopCandidates.PerKey(
                candidate_column="c",
                candidates=candidates,
                record_level=True,
                key_column="key",
                keys=keys,
                epsilon=EPSILON,
                method=check_method(method),
            )
            | Count.Globally()  # type: ignore[no-untyped-call]
            | beam.Map(check)  # type: ignore[no-untyped-call]
        )
    return time.perf_counter() - start


def per_key_job_rows(num_keys: int, small_keys: int, repeats: int) -> list[dict[str, Any]]:
    """A whole ``.PerKey`` job: seconds at ``num_keys`` and ``small_keys`` keys, and the cost
    per extra key ((T(num_keys) - T(small_keys)) / (num_keys - small_keys), medians)."""
    rows = []
    for d in (2, 10):
        for name, method in METHODS.items():
            large = statistics.median(
                per_key_job_seconds(num_keys, d, method) for _ in range(repeats)
            )
            small = statistics.median(
                per_key_job_seconds(small_keys, d, method) for _ in range(repeats)
            )
            per_key = (large - small) / (num_keys - small_keys) * 1e6
            rows.append({"d": d, "method": name, "large": large, "small": small, "us": per_key})
            print(
                f"  done: .PerKey job d={d} {name}: {large:.1f} s at {num_keys:,d} keys, "
                f"{small:.1f} s at {small_keys:,d}: {per_key:.1f} us per key"
            )
    return rows


def _ratio(theirs: float | None, ours: float) -> str:
    return "n/a" if theirs is None else f"{theirs / ours:.1f}"


def report(
    keys: int, per_key: list[dict[str, Any]], single: list[dict[str, Any]],
    grid: dict[str, Any], jobs: list[dict[str, Any]],
) -> list[str]:  # fmt: skip
    """Markdown tables and verdicts."""
    lines = [
        f"Per key, {keys:,d} keys (us per key; 'one call per key' = select() in a loop)",
        "",
        "| d | method | batched (us/key) | one call per key (us/key) | speed-up "
        "| OpenDP per key (us/key) | OpenDP/ours |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for row in per_key:
        theirs = row.get("opendp")
        lines.append(
            f"| {row['d']} | {row['method']} | {row['ours']:.2f} | {row['before']:.1f} "
            f"| {row['before'] / row['ours']:.0f}x | "
            f"{'n/a' if theirs is None else f'{theirs:.1f}'} | {_ratio(theirs, row['ours'])} |"
        )
    lines += [
        "",
        "Single select() call (us per call)",
        "",
        "| d | method | us |",
        "|---:|---|---:|",
    ]
    lines += [f"| {r['d']} | {r['method']} | {r['ours']:.0f} |" for r in single]
    lines += [
        "",
        f"Grid: {grid['prices']:,d} prices, {grid['values']:,d} values, in one process (s)",
        "",
        "| read grid | score | select (PF) | total | OpenDP select | OpenDP/ours (select) |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    theirs = grid.get("opendp select")
    lines.append(
        f"| {grid['read grid']:.3f} | {grid['score']:.3f} | {grid['select']:.3f} "
        f"| {grid['total']:.3f} | {'n/a' if theirs is None else f'{theirs:.3f}'} "
        f"| {_ratio(theirs, grid['select'])} |"
    )
    if jobs:
        lines += ["", "Whole best_price process", "", "| grid | s | exit | last line |"]
        lines += ["|---|---:|---:|---|"]
        lines += [f"| {j['job']} | {j['seconds']:.2f} | {j['exit']} | {j['last']} |" for j in jobs]
    lines.append("")
    for row in per_key:
        if row["d"] <= 10:
            ok = row["ours"] <= TARGET_US_PER_KEY
            lines.append(
                f"{'PASS' if ok else 'FAIL'}: {row['method']} d={row['d']} "
                f"<= {TARGET_US_PER_KEY:.0f} us per key"
            )
    ok = grid["total"] < TARGET_GRID_SECONDS
    lines.append(f"{'PASS' if ok else 'FAIL'}: grid in one process < {TARGET_GRID_SECONDS:.0f} s")
    return lines


def job_report(keys: int, small: int, rows: list[dict[str, Any]]) -> list[str]:
    """The whole ``.PerKey`` job table."""
    lines = [
        f"Whole TopCandidates.PerKey job (DirectRunner, record-level, {JOB_ROWS_PER_KEY} rows "
        f"per key): seconds at {keys:,d} and {small:,d} keys, us per extra key",
        "",
        f"| d | method | {keys:,d} keys (s) | {small:,d} keys (s) | us per key |",
        "|---:|---|---:|---:|---:|",
    ]
    lines += [
        f"| {r['d']} | {r['method']} | {r['large']:.1f} | {r['small']:.1f} | {r['us']:.1f} |"
        for r in rows
    ]
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    """Parse arguments, run, print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one repeat")
    parser.add_argument("--no-opendp", action="store_true", help="do not time OpenDP")
    parser.add_argument(
        "--job",
        action="store_true",
        help="also time whole jobs: a .PerKey job over 10^5 keys and the best_price process",
    )
    parser.add_argument(
        "--only-jobs", action="store_true", help="with --job: skip the in-process timings"
    )
    parser.add_argument(
        "--job-part",
        choices=("all", "per_key", "best_price"),
        default="all",
        help="with --job: which whole jobs to time (default all)",
    )
    args = parser.parse_args(argv)
    if args.only_jobs and not args.job:
        parser.error("--only-jobs needs --job")
    use_opendp = not args.no_opendp
    if args.quick:
        keys, sample, repeats, calls, spec, values = 2_000, 50, 1, 20, "0.01:100.01:0.01", 10**4
        job_keys, job_small = 2_000, 200
    else:
        keys, sample, repeats, calls, spec, values = 100_000, 2_000, 5, 500, GRID_SPEC, 10**6
        job_keys, job_small = JOB_KEYS, JOB_SMALL_KEYS
    print("Many selections and large grids: medians of repeats")
    print("\n".join(machine_summary()))
    lines: list[str] = []
    if not args.only_jobs:
        per_key = per_key_rows(keys, sample, repeats, use_opendp)
        single = single_call_rows(calls)
        grid = grid_row(spec, values, repeats, use_opendp)
    job_table: list[str] = []
    jobs: list[dict[str, Any]] = []
    if args.job and args.job_part in ("all", "per_key"):
        job_table = job_report(job_keys, job_small, per_key_job_rows(job_keys, job_small, 1))
    if args.job and args.job_part in ("all", "best_price"):
        jobs = job_rows(sys.executable, 1 if args.quick else 3)
    print()
    if not args.only_jobs:
        lines = report(keys, per_key, single, grid, jobs)
    elif jobs:
        lines = ["Whole best_price process", "", "| grid | s | exit | last line |"]
        lines += ["|---|---:|---:|---|"]
        lines += [f"| {j['job']} | {j['seconds']:.2f} | {j['exit']} | {j['last']} |" for j in jobs]
    print("\n".join([*job_table, "", *lines]))


if __name__ == "__main__":
    main()
