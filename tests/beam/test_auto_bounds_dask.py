"""``max_contributions="auto"`` on Beam's Dask runner (2 worker processes).

Beam's Dask runner silently drops the output of a ``CombinePerKey`` with a side input; the
auto path gives the chosen bound to ``Map`` steps only. This test fails if a release is lost.
"""

from __future__ import annotations

import os
import pickle
import sys
import tempfile
import uuid
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.internal.cloudpickle import cloudpickle as beam_cloudpickle
from apache_beam.options.pipeline_options import PipelineOptions

from beam_dp.beam.quantiles import PrivateMedian

beam_cloudpickle.register_pickle_by_value(sys.modules[__name__])


class _Write(beam.DoFn):
    def __init__(self, directory: str) -> None:
        self._directory = directory

    def process(self, release: Any) -> None:
        with open(os.path.join(self._directory, uuid.uuid4().hex), "wb") as handle:
            pickle.dump(release, handle)


def test_auto_median_per_key_releases_on_dask(dask_cluster: Any) -> None:
    rng = np.random.default_rng(3)
    users = np.repeat(np.arange(300), 8)
    keys = np.where(users % 2 == 0, "north", "south")
    values = np.where(keys == "north", rng.uniform(1, 3, users.size), rng.uniform(5, 7, users.size))
    order = rng.permutation(users.size)
    batches = [
        pa.record_batch({"user": users[rows], "region": keys[rows], "value": values[rows]})
        for rows in np.array_split(order, 6)
    ]
    directory = tempfile.mkdtemp()
    options = PipelineOptions(dask_client_address=dask_cluster.scheduler_address)
    runner = "apache_beam.runners.dask.dask_runner.DaskRunner"
    with beam.Pipeline(runner=runner, options=options) as pipeline:
        _ = (
            pipeline
            | beam.Create(batches)
            | PrivateMedian.PerKey(
                lower=0.0,
                upper=10.0,
                unit_column="user",
                key_column="region",
                keys=["north", "south"],
                epsilon=1e5,
                max_contributions="auto",
                num_points=1001,
            )
            | beam.ParDo(_Write(directory))
        )
    releases = []
    for name in os.listdir(directory):
        with open(os.path.join(directory, name), "rb") as handle:
            releases.append(pickle.load(handle))
    assert sorted(r.key for r in releases) == ["north", "south"]
    for release in releases:
        assert release.ledger.contribution_bounds["max_contributions_per_unit"] == 8
        assert (1 <= release.value <= 3) if release.key == "north" else (5 <= release.value <= 7)
