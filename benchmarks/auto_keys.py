"""Privately chosen key and candidate bounds against fixed ones (issue 14).

``PYTHONPATH=. python -m benchmarks.auto_keys [--runs 20]`` runs the Beam transforms on the
in-process runner (the whole path: bounding, the choice, the re-bound, the releases), at
epsilon 1, on synthetic people whose number of keys (or labels) is known:

* **keys per person** (``PrivateMedian.PerKey``): 3 000 people, each with rows in 1-3 of 8
  public keys (uniformly), 3 rows per key, values of key ``i`` ~ N(10 i, 3); the error is the
  absolute difference between each key's released median and its true median (over all
  rows), averaged over keys; ``max_keys_per_unit`` = 1 (the quantile family's default), 2, 4,
  8 and ``"auto"``.
* **distinct labels per person** (``SelectCandidates``): 4 000 people naming 1-3 of 30 sites
  (weights 30 : 29 : ... : 1), delta 1e-6; the number of the 30 sites released and the
  threshold, for ``max_candidates_per_unit`` = 1, 4, 16, 64 and ``"auto"`` (cap 64).

Prints Markdown tables (mean over ``--runs`` releases; the chosen bounds' counts for auto).
"""

from __future__ import annotations

import argparse
import collections
import os
import pickle
import tempfile
import time
import uuid
import warnings
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from beam_dp.beam.key_selection import SelectCandidates
from beam_dp.beam.quantiles import PrivateMedian

KEYS = [f"k{i}" for i in range(8)]


class _Dump(beam.DoFn):
    def __init__(self, directory: str) -> None:
        self._directory = directory

    def process(self, release: Any) -> None:
        with open(os.path.join(self._directory, uuid.uuid4().hex), "wb") as handle:
            pickle.dump(release, handle)


def _run(batches: list[pa.RecordBatch], transform: beam.PTransform) -> list[Any]:
    with tempfile.TemporaryDirectory() as directory:
        with beam.Pipeline(runner=FnApiRunner()) as pipeline:
            _ = pipeline | beam.Create(batches) | transform | beam.ParDo(_Dump(directory))
        out = []
        for name in os.listdir(directory):
            with open(os.path.join(directory, name), "rb") as handle:
                out.append(pickle.load(handle))
        return out


def _batches(columns: dict[str, np.ndarray], rng: np.random.Generator) -> list[pa.RecordBatch]:
    order = rng.permutation(next(iter(columns.values())).size)
    return [
        pa.record_batch({name: column[order[i : i + 2000]] for name, column in columns.items()})
        for i in range(0, order.size, 2000)
    ]


def keys_per_person(runs: int, rng: np.random.Generator) -> list[str]:
    users, keys, values = [], [], []
    for user in range(3000):
        for key in rng.choice(8, size=int(rng.integers(1, 4)), replace=False):
            users += [user] * 3
            keys += [KEYS[key]] * 3
            values += list(rng.normal(10 * key, 3, 3))
    columns = {"user": np.array(users), "key": np.array(keys), "value": np.array(values)}
    truth = {k: float(np.median(columns["value"][columns["key"] == k])) for k in KEYS}
    batches = _batches(columns, rng)
    lines = [
        "| max_keys_per_unit | mean abs error of the 8 medians | chosen |",
        "|---|---:|---|",
    ]
    for bound in (1, 2, 4, 8, "auto"):
        errors: list[float] = []
        chosen: collections.Counter[int] = collections.Counter()
        for _ in range(runs):
            releases = _run(
                batches,
                PrivateMedian.PerKey(
                    lower=-10.0,
                    upper=90.0,
                    unit_column="user",
                    keys=KEYS,
                    epsilon=1.0,
                    max_contributions=3,
                    max_keys_per_unit=bound,
                    num_points=10_001,
                ),
            )
            errors.append(float(np.mean([abs(r.value - truth[r.key]) for r in releases])))
            chosen[int(releases[0].ledger.contribution_bounds["max_keys_per_unit"])] += 1
        shown = ", ".join(f"{k}: {n}" for k, n in sorted(chosen.items())) if bound == "auto" else ""
        lines.append(f"| {bound} | {np.mean(errors):.3f} | {shown} |")
    return lines


def labels_per_person(runs: int, rng: np.random.Generator) -> list[str]:
    users, sites = [], []
    weights = np.arange(30, 0, -1) / 465
    for user in range(4000):
        for site in rng.choice(30, size=int(rng.integers(1, 4)), replace=False, p=weights):
            users.append(user)
            sites.append(f"site{site:02d}")
    batches = _batches({"user": np.array(users), "site": np.array(sites)}, rng)
    lines = [
        "| max_candidates_per_unit | sites released (of 30) | threshold | chosen |",
        "|---|---:|---:|---|",
    ]
    for bound in (1, 4, 16, 64, "auto"):
        released: list[int] = []
        thresholds: list[float] = []
        chosen: collections.Counter[int] = collections.Counter()
        for _ in range(runs):
            options: dict[str, Any] = {"bound_cap": 64} if bound == "auto" else {}
            (release,) = _run(
                batches,
                SelectCandidates.Globally(
                    candidate_column="site",
                    unit_column="user",
                    epsilon=1.0,
                    delta=1e-6,
                    max_candidates_per_unit=bound,
                    **options,
                ),
            )
            released.append(len(release.value))
            thresholds.append(release.ledger.accuracy["release_threshold"])
            chosen[int(release.ledger.contribution_bounds["max_candidates_per_unit"])] += 1
        shown = ", ".join(f"{k}: {n}" for k, n in sorted(chosen.items())) if bound == "auto" else ""
        lines.append(f"| {bound} | {np.mean(released):.1f} | {np.mean(thresholds):.0f} | {shown} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--seed", type=int, default=20261123)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    rng = np.random.default_rng(args.seed)
    start = time.perf_counter()
    print(f"### Keys per person (epsilon 1, {args.runs} releases per row)\n")
    print("\n".join(keys_per_person(args.runs, rng)))
    print(f"\n### Distinct labels per person, DP key selection ({args.runs} releases per row)\n")
    print("\n".join(labels_per_person(args.runs, rng)))
    print(f"\n({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
