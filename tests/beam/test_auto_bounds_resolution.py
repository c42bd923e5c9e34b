"""``resolution=`` on the quantile transforms: the grid follows the column's resolution."""

from __future__ import annotations

import os
import pickle
import tempfile
import uuid
from typing import Any

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from beam_dp.beam.quantiles import DEFAULT_NUM_POINTS, PrivateMedian, PrivateQuantiles
from beam_dp.summaries.grids import resolution_grid


class _Collect(beam.DoFn):
    def __init__(self, directory: str) -> None:
        self._directory = directory

    def process(self, release: Any) -> None:
        with open(os.path.join(self._directory, uuid.uuid4().hex), "wb") as handle:
            pickle.dump(release, handle)


def _load(directory: str) -> list[Any]:
    out = []
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb") as handle:
            out.append(pickle.load(handle))
    return out


def median(**options: Any) -> PrivateMedian.Globally:
    base: dict[str, Any] = {
        "lower": -100.0,
        "upper": 1300.0,
        "unit_column": None,
        "record_level": True,
        "epsilon": 1.0,
    }
    return PrivateMedian.Globally(**{**base, **options})


def test_default_grid_stays_uniform() -> None:
    grid = median()._spec.grid
    assert grid.kind == "uniform" and grid.num_points == DEFAULT_NUM_POINTS


@pytest.mark.parametrize("resolution", ["integer", 1, "1"])
def test_integer_resolution_puts_the_grid_on_the_integers(resolution: object) -> None:
    grid = median(resolution=resolution)._spec.grid
    assert grid.num_points == 1401
    assert np.array_equal(grid.points, np.arange(-100, 1301, dtype=np.float64))
    assert grid == resolution_grid(-100.0, 1300.0, 1)


def test_decimal_resolution_points_are_the_decimals_a_reader_makes() -> None:
    grid = PrivateQuantiles.Globally(
        [0.5], lower=0.0, upper=2.0, record_level=True, epsilon=1.0, resolution="0.01"
    )._spec.grid
    assert grid.num_points == 201
    assert float(grid.points[7]) == float("0.07")
    capped = median(resolution=0.5, num_points=100)._spec.grid  # 2801 halves: every 29th
    assert capped.num_points <= 100
    assert np.all(np.diff(capped.points) == 14.5) and np.all(capped.points % 0.5 == 0)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"resolution": "cents"}, "'resolution' must be a decimal number"),
        ({"resolution": 0}, "'resolution' must be > 0"),
        ({"resolution": float("nan")}, "'resolution' must be finite"),
        ({"resolution": 1, "grid": "log"}, "give 'resolution' or 'grid', not both"),
        ({"resolution": 1, "num_points": 0}, "'num_points' must be an integer >= 1"),
    ],
)
def test_bad_resolution_is_refused_naming_the_parameter(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        median(**options)


def test_integer_grid_releases_the_integer_median_where_the_uniform_grid_spreads() -> None:
    """Issue 14: integer data whose median is -5 over [-100, 1300]: the integer grid gives
    exactly -5 (ties between points inside a gap are gone); the uniform grid of 10^6 points
    has ~700 equally scored points in [-6, -5)."""
    values = np.concatenate([np.full(200, -5.0), np.arange(-60.0, -5.0), np.arange(-4.0, 51.0)])
    with tempfile.TemporaryDirectory() as directory:
        with beam.Pipeline(runner=FnApiRunner()) as pipeline:
            _ = (
                pipeline
                | beam.Create([values])
                | median(value_column=None, resolution="integer", epsilon=2.0)
                | beam.ParDo(_Collect(directory))
            )
        (release,) = _load(directory)
    assert release.value == -5.0
