"""The same selection pipeline on three runners, over a unit spread across several files.

Runners: the in-process DirectRunner (its FnApiRunner), the DirectRunner in
``multi_processing`` mode with 2 workers, and Beam's Dask runner against a
``dask.distributed.LocalCluster`` of 2 worker processes started and stopped here.

The data puts some privacy units' records in every input file. The test checks the bound
itself, through the real pipeline: a probe score (a custom ``CombineFn`` run with a huge ε, so
that its selection is its arg-max) releases a verdict on the combiner's inputs after bounding:
no unit may appear in two inputs (its rows were brought together from every file), and the
largest unit must hold exactly the bound (enforced, on all of its rows). The heavy-hitter
selection on the same data is won by the wrong site if units are deduplicated per file only.
"""

from __future__ import annotations

import os
import pickle
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.internal.cloudpickle import cloudpickle as beam_cloudpickle
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from beam_dp.batching import UNIT, ContributionBounds
from beam_dp.beam.selection import ExponentialSelect, TopCandidates
from beam_dp.release import Release
from pipelines.common import wait_for

# Workers in other processes cannot import this test module: ship its code by value.
beam_cloudpickle.register_pickle_by_value(sys.modules[__name__])

BOUND = 3
FILES = 4
SITES = ["win", "spam", "other"]


def write_files(directory: Path) -> list[str]:
    """Four Parquet files; eight spammers have 2 rows on "spam" in every file.

    Distinct units: win 20, other 12, spam 8. Deduplicated per file only, spam would have 32.
    """
    rows: list[list[dict[str, Any]]] = [[] for _ in range(FILES)]
    for f in range(FILES):
        for s in range(8):
            rows[f] += [{"user": f"spammer-{s}", "site": "spam"}] * 2
    for u in range(20):  # twenty distinct visitors of "win", one row each
        rows[u % FILES].append({"user": f"visitor-{u}", "site": "win"})
    for u in range(12):  # background units with 1 or 2 rows, some across files
        for r in range(1 + u % 2):
            rows[(u + r) % FILES].append({"user": f"bg-{u}", "site": "other"})
    paths = []
    for f, part in enumerate(rows):
        path = directory / f"export-{f:05d}.parquet"
        pq.write_table(pa.Table.from_pylist(part), path, row_group_size=7)
        paths.append(str(path))
    return paths


def read_batches(path: str) -> Iterator[pa.Table]:
    for batch in pq.ParquetFile(path).iter_batches(batch_size=7):
        yield pa.Table.from_batches([batch])


GATHERED_AND_BOUNDED, SPLIT_ACROSS_INPUTS, OVER_THE_BOUND, BELOW_THE_BOUND = range(4)
VERDICTS = range(4)


class BoundProbe(beam.CombineFn):  # type: ignore[misc]
    """Test-only score: a verdict on how units reached the combiner, as a one-hot vector.

    Each combiner input must hold all bounded rows of every unit in it: no unit may appear in
    two inputs, and the largest unit (8 rows in the data) must hold exactly ``BOUND`` rows.
    """

    def create_accumulator(self) -> list[tuple[np.ndarray, np.ndarray]]:
        return []

    def add_input(self, accumulator: list[Any], batch: dict[str, np.ndarray]) -> list[Any]:
        accumulator.append(np.unique(batch[UNIT], return_counts=True))
        return accumulator

    def merge_accumulators(self, accumulators: Any) -> list[Any]:
        first, *rest = accumulators
        for other in rest:
            first.extend(other)
        return first

    def extract_output(self, accumulator: list[Any]) -> list[int]:
        units = np.concatenate([units for units, _ in accumulator])
        rows = np.concatenate([counts for _, counts in accumulator])
        if np.unique(units).size < units.size:
            verdict = SPLIT_ACROSS_INPUTS
        elif rows.max() > BOUND:
            verdict = OVER_THE_BOUND
        elif rows.max() < BOUND:
            verdict = BELOW_THE_BOUND
        else:
            verdict = GATHERED_AND_BOUNDED
        return [1 if v == verdict else 0 for v in VERDICTS]


class WriteBundle(beam.DoFn):
    def __init__(self, directory: str) -> None:
        self._directory = directory

    def start_bundle(self) -> None:
        self._items: list[Release] = []

    def process(self, release: Release) -> None:
        self._items.append(release)

    def finish_bundle(self) -> None:
        if self._items:
            with open(os.path.join(self._directory, uuid.uuid4().hex), "wb") as handle:
                pickle.dump(self._items, handle)


def build(pipeline: beam.Pipeline, paths: list[str], out: str, *, beam_io: bool) -> None:
    if beam_io:  # Beam's Parquet source over a glob of the sharded export
        pattern = os.path.join(os.path.dirname(paths[0]), "export-*.parquet")
        batches = pipeline | beam.io.ReadFromParquetBatched(pattern)
    else:  # the Dask runner does not translate Beam sources: read the files in a ParDo
        batches = pipeline | beam.Create(paths) | beam.FlatMap(read_batches)
    probe = batches | "Probe" >> ExponentialSelect.Globally(
        BoundProbe(),
        candidates=VERDICTS,
        epsilon=1000.0,  # test-only: the probe's selection is its arg-max
        sensitivity=1,
        monotone=True,
        unit_column="user",
        bounds=ContributionBounds(max_contributions_per_unit=BOUND),
        name="probe",
    )
    top = batches | "Top" >> TopCandidates.Globally(
        candidate_column="site", candidates=SITES, unit_column="user", epsilon=4.0
    )
    _ = (probe, top) | beam.Flatten() | beam.ParDo(WriteBundle(out))


def collect(out: Path) -> dict[str, Release]:
    releases: list[Release] = []
    for path in out.iterdir():
        with open(path, "rb") as handle:
            releases.extend(pickle.load(handle))
    return {release.name: release for release in releases}


def check(releases: dict[str, Release]) -> None:
    assert set(releases) == {"probe", "top_candidates"}
    # Every unit's rows gathered from all files into one input, and bounded to exactly BOUND.
    assert releases["probe"].value == GATHERED_AND_BOUNDED
    # "spam" has 8 distinct units (32 if deduplicated per file only), "win" 20.
    assert releases["top_candidates"].value == "win"
    assert releases["top_candidates"].ledger.contribution_bounds == {
        "distinct_candidates": 1,
        "max_windows_per_unit": 1,
    }


def run_on(runner: Any, options: PipelineOptions | None, tmp_path: Path, beam_io: bool) -> None:
    paths = write_files(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    pipeline = beam.Pipeline(runner=runner, options=options)
    build(pipeline, paths, str(out), beam_io=beam_io)
    wait_for(pipeline.run())
    check(collect(out))


def test_direct_runner_in_process(tmp_path: Path) -> None:
    run_on(FnApiRunner(), None, tmp_path, beam_io=True)


@pytest.mark.slow
def test_direct_runner_multi_processing_two_workers(tmp_path: Path) -> None:
    options = PipelineOptions(direct_running_mode="multi_processing", direct_num_workers=2)
    run_on(FnApiRunner(), options, tmp_path, beam_io=True)


@pytest.mark.slow
def test_dask_runner_on_a_local_cluster_of_two_processes(tmp_path: Path, dask_cluster: Any) -> None:
    import cloudpickle
    from apache_beam.runners.dask.dask_runner import DaskRunner

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    options = PipelineOptions(dask_client_address=dask_cluster.scheduler_address)
    run_on(DaskRunner(), options, tmp_path, beam_io=False)
