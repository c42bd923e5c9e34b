"""Quantiles, a coarse-to-fine median and a mean on Beam's Dask runner (2 worker processes).

The same pipeline runs on the in-process FnApiRunner and on
``apache_beam.runners.dask.dask_runner.DaskRunner`` against a ``dask.distributed.LocalCluster``
of two worker processes that the test starts and stops. Units' rows are spread over several
files, so bounding must gather them across workers; with a huge (test-only) epsilon every
release is its best grid point, which both runners must agree on and which the test checks
against the data.
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

from beam_dp.beam.mean import PrivateMean
from beam_dp.beam.quantiles import PrivateMedian, PrivateQuantiles
from beam_dp.release import Release

# Workers in other processes cannot import this test module: ship its code by value.
beam_cloudpickle.register_pickle_by_value(sys.modules[__name__])

HUGE = 1e5  # test-only epsilon
FILES = 4
KEYS = ["north", "south"]


def write_files(directory: Path) -> tuple[list[str], dict[str, Any]]:
    """Four files; every unit has rows in several of them; one unit floods value 9.5."""
    rng = np.random.default_rng(31)
    rows = 4000
    users = rng.integers(0, 400, rows)
    keys = np.where(users % 2 == 0, "north", "south")
    values = np.where(keys == "north", rng.uniform(1, 3, rows), rng.uniform(5, 7, rows))
    flood = 3000  # unit 10**6 sends 3000 copies of 9.5 to "north"
    users = np.concatenate([users, np.full(flood, 10**6)])
    keys = np.concatenate([keys, np.full(flood, "north")])
    values = np.concatenate([values, np.full(flood, 9.5)])
    order = rng.permutation(users.size)
    table = pa.table({"user": users[order], "region": keys[order], "value": values[order]})
    paths = []
    for f in range(FILES):
        path = directory / f"part-{f}.parquet"
        pq.write_table(table.slice(f * table.num_rows // FILES, table.num_rows // FILES), path)
        paths.append(str(path))
    # What a bound of 3 rows per unit and 1 key per unit keeps is random; check loose facts.
    truth = {"north_median": float(np.median(values[:rows][keys[:rows] == "north"]))}
    return paths, truth


def read_batches(path: str) -> Iterator[pa.RecordBatch]:
    yield from pq.ParquetFile(path).iter_batches(batch_size=500)


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


def build(pipeline: beam.Pipeline, paths: list[str], out: str) -> None:
    # The Dask runner does not translate Beam sources: read the files in a ParDo.
    batches = pipeline | beam.Create(paths) | beam.FlatMap(read_batches)
    # A fixed salt: both runners keep the same rows of each unit.
    common = {"lower": 0.0, "upper": 10.0, "epsilon": HUGE, "num_points": 10_001, "salt": 5}
    per_key = batches | "PerKey" >> PrivateQuantiles.PerKey(
        [0.25, 0.5, 0.75],
        unit_column="user",
        key_column="region",
        keys=KEYS,
        max_contributions=3,
        **common,
    )
    median = batches | "Median" >> PrivateMedian.Globally(
        unit_column="user", max_contributions=3, refine=True, refine_points=1001, **common
    )
    mean = batches | "Mean" >> PrivateMean.Globally(
        record_level=True, **{k: v for k, v in common.items() if k != "salt"}
    )
    # max_keys_per_unit="auto": every unit has one region, so one key per unit is chosen
    keys_auto = batches | "KeysAuto" >> PrivateMedian.PerKey(
        unit_column="user",
        key_column="region",
        keys=KEYS,
        max_contributions=3,
        max_keys_per_unit="auto",
        **common,
    )
    _ = (per_key, median, mean, keys_auto) | beam.Flatten() | beam.ParDo(WriteBundle(out))


def collect(out: Path) -> dict[Any, Release]:
    releases: list[Release] = []
    for path in out.iterdir():
        with open(path, "rb") as handle:
            releases.extend(pickle.load(handle))
    return {(release.statistic, release.key): release for release in releases}


def check(releases: dict[Any, Release], truth: dict[str, Any]) -> None:
    assert set(releases) == {
        ("quantiles", "north"),
        ("quantiles", "south"),
        ("median", None),
        ("mean", None),
        ("median", "north"),
        ("median", "south"),
    }
    for key, low, high in (("north", 1.0, 3.0), ("south", 5.0, 7.0)):
        release = releases[("median", key)]
        assert low < release.value < high
        assert release.ledger.contribution_bounds["max_keys_per_unit"] == 1  # chosen
        assert release.ledger.contribution_bounds["max_keys_per_unit_cap"] == 2
    north = releases[("quantiles", "north")].value
    south = releases[("quantiles", "south")].value
    assert north == sorted(north) and south == sorted(south)
    # Bounded to 3 rows, the flooding unit cannot reach the upper quartile of "north".
    assert 1.0 < north[0] < north[1] < north[2] < 3.0
    assert abs(north[1] - truth["north_median"]) < 0.2
    assert 5.0 < south[0] < south[2] < 7.0
    assert releases[("quantiles", "north")].ledger.contribution_bounds == {
        "max_contributions_per_unit": 3,
        "max_keys_per_unit": 1,
        "max_windows_per_unit": 1,
    }
    assert 2.0 < releases[("median", None)].value < 6.0
    assert "fine_rank_error" in releases[("median", None)].ledger.accuracy
    # Record level: the flood counts in full (3000 x 9.5 of 7000 values).
    assert 5.5 < releases[("mean", None)].value < 6.5


def run_on(runner: Any, options: PipelineOptions | None, tmp_path: Path) -> dict[Any, Release]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    paths, truth = write_files(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    pipeline = beam.Pipeline(runner=runner, options=options)
    build(pipeline, paths, str(out))
    pipeline.run().wait_until_finish()
    releases = collect(out)
    check(releases, truth)
    return releases


def test_in_process_runner(tmp_path: Path) -> None:
    run_on(FnApiRunner(), None, tmp_path)


@pytest.mark.slow
def test_dask_runner_on_a_local_cluster_of_two_processes(tmp_path: Path, dask_cluster: Any) -> None:
    import cloudpickle
    from apache_beam.runners.dask.dask_runner import DaskRunner

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    options = PipelineOptions(dask_client_address=dask_cluster.scheduler_address)
    dask = run_on(DaskRunner(), options, tmp_path / "dask")
    local = run_on(FnApiRunner(), None, tmp_path / "local")
    # With a huge epsilon both runners release a best grid point: several grid points between
    # two neighbouring values tie for best, so quantiles agree to within such a gap.
    for key in (("quantiles", "north"), ("quantiles", "south")):
        np.testing.assert_allclose(dask[key].value, local[key].value, atol=0.05)
    assert dask[("mean", None)].value == pytest.approx(local[("mean", None)].value, abs=2e-3)
