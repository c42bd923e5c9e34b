"""PrivateCDF (Globally and PerKey) on Beam's Dask runner (2 worker processes) and in process.

The same pipeline runs on the in-process FnApiRunner and on
``apache_beam.runners.dask.dask_runner.DaskRunner`` against a ``dask.distributed.LocalCluster``
of two worker processes. Units' rows are spread over several files, so bounding must gather
them across workers; one unit floods a value that bounding must cut to ``max_contributions``.
Each release must be within its own KS bound (at a confidence that fails with probability
1e-9) of the empirical CDF of what bounding can keep, on both runners.
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

from beam_dp.beam.cdf import PrivateCDF
from beam_dp.release import Release

# Workers in other processes cannot import this test module: ship its code by value.
beam_cloudpickle.register_pickle_by_value(sys.modules[__name__])

FILES = 4
KEYS = ["north", "south"]
SURE = 1 - 1e-9
GRID = np.linspace(0.0, 10.0, 201)


def write_files(directory: Path) -> tuple[list[str], dict[str, np.ndarray]]:
    """Four files; every unit has rows in several; one unit floods 9.5 into "north"."""
    rng = np.random.default_rng(41)
    rows = 4000
    users = rng.integers(0, 400, rows)
    keys = np.where(users % 2 == 0, "north", "south")
    values = np.where(keys == "north", rng.uniform(1, 3, rows), rng.uniform(5, 7, rows))
    flood = 3000
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
    honest = {key: values[:rows][keys[:rows] == key] for key in KEYS}
    return paths, honest


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
    batches = pipeline | beam.Create(paths) | beam.FlatMap(read_batches)
    common = {"lower": 0.0, "upper": 10.0, "num_points": GRID.size, "confidence": SURE}
    per_key = batches | "PerKey" >> PrivateCDF.PerKey(
        unit_column="user",
        key_column="region",
        keys=KEYS,
        max_contributions=3,
        epsilon=20.0,  # ~600 values kept per key, c = 3 and 1e-9 failure: a tight bound
        quantiles=[0.5],
        salt=5,
        **common,
    )
    overall = batches | "Globally" >> PrivateCDF.Globally(
        unit_column="user", max_contributions=1, epsilon=2.0, relation="replace", n=401, **common
    )
    _ = (per_key, overall) | beam.Flatten() | beam.ParDo(WriteBundle(out))


def collect(out: Path) -> dict[Any, Release]:
    releases: list[Release] = []
    for path in out.iterdir():
        with open(path, "rb") as handle:
            releases.extend(pickle.load(handle))
    return {release.key: release for release in releases}


def released_cdf(release: Release) -> np.ndarray:
    return np.array([release.value.cdf_at(float(g)) for g in GRID])


def check(releases: dict[Any, Release], honest: dict[str, np.ndarray]) -> None:
    assert set(releases) == {"north", "south", None}
    for key in KEYS:
        release = releases[key]
        bound = release.accuracy["ks_distance"]
        assert bound < 0.25 and release.value.count_released
        # The kept values differ from the honest ones by at most 3 flooded 9.5s and the rows
        # bounding drops from honest units (at most 3 kept of ~10 each): compare with the
        # released quantile instead of one exact dataset.
        low, high = (1.0, 3.0) if key == "north" else (5.0, 7.0)
        assert low < release.value.quantile(0.5) < high
        cdf, points = released_cdf(release), GRID
        assert cdf[points < low - 0.1].max() <= bound  # no data below ``low``
        # Above ``high`` only the flood's 3 kept values (of ~600 kept) remain; unbounded,
        # the flood's 3000 would hold F there near 0.4.
        assert cdf[(points > high + 0.1) & (points < 9.4)].min() >= 0.99 - bound
        assert release.ledger.contribution_bounds == {
            "max_contributions_per_unit": 3,
            "max_keys_per_unit": 1,
            "max_windows_per_unit": 1,
        }
    overall = releases[None]
    assert not overall.value.count_released and overall.value.n_hat == 401
    # One value per unit: the flooding unit keeps one 9.5, so F(9) is about 400/401.
    assert released_cdf(overall)[GRID >= 9.0][0] >= 400 / 401 - overall.accuracy["ks_distance"]


def run_on(runner: Any, options: PipelineOptions | None, tmp_path: Path) -> dict[Any, Release]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    paths, honest = write_files(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    pipeline = beam.Pipeline(runner=runner, options=options)
    build(pipeline, paths, str(out))
    pipeline.run().wait_until_finish()
    releases = collect(out)
    check(releases, honest)
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
    # The released counts (and so k and the bounds) are random; what is public must agree.
    assert dask[None].ledger == local[None].ledger  # public n: k and the bound are fixed
    for key in KEYS:
        a, b = dask[key].ledger, local[key].ledger
        assert (a.epsilon, a.mechanism, a.num_candidates) == (b.epsilon, b.mechanism, 201)
        assert a.contribution_bounds == b.contribution_bounds
