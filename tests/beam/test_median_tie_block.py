"""A block of tied values at the median, released through the public Beam transform (issue 39,
item 3).

150 values near 70 and 300 values exactly 195: the median (rank 225) lies inside the block of
195s, which is a grid point (bounds [0, 200], 2 001 points, step 0.1). Before the tie-aware
score, the point 195 scored ``-|(1 - 1/2) 150 - 1/2 0| = -75``, no better than the empty grid
points beside it (``-|75 - 150| = -75``), so 129 of 200 releases at epsilon 0.5 fell below 150.
With the tie-aware score 195 scores 0 (its rank range [150, 450] holds 225) and every other
point at most -75, so a release misses 195 by more than one grid step with probability at most
about ``2 000 exp(-25)`` at the median's own epsilon (1/3 after its interval's share).

The release's accuracy statement holds as a user reads it: the released median's rank range is
within ``rank_error_beyond_best_grid_point`` of ``N / 2`` (the best grid point, 195, is at
distance 0), where the tie-blind score's releases were at least 75 ranks away, beyond the
stated 32.

The releases come from one pipeline with 200 public keys: each unit contributes to one key
(``max_keys_per_unit=1``), so each key's release is that of ``PrivateMedian.Globally`` on the
same data at the full epsilon, drawn independently (OS CSPRNG).
"""

from __future__ import annotations

import os
import pickle
import tempfile
import uuid
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from beam_dp.beam.quantiles import PrivateMedian
from beam_dp.release import Release

RELEASES = 200
GRID_STEP = 0.1  # (200 - 0) / (2 001 - 1)


class _Keep(beam.DoFn):
    """Pickle each release into a directory (runners pickle DoFns: no shared memory)."""

    def __init__(self, directory: str) -> None:
        self._directory = directory

    def process(self, release: Release) -> None:
        with open(os.path.join(self._directory, uuid.uuid4().hex), "wb") as handle:
            pickle.dump(release, handle)


def releases_of(transform: Any, batch: pa.RecordBatch) -> list[Release]:
    with tempfile.TemporaryDirectory() as directory:
        with beam.Pipeline(runner=FnApiRunner()) as pipeline:
            _ = pipeline | beam.Create([batch]) | transform | beam.ParDo(_Keep(directory))
        out = []
        for name in os.listdir(directory):
            with open(os.path.join(directory, name), "rb") as handle:
                out.append(pickle.load(handle))
        return out


def tie_block_at_the_median(rng: np.random.Generator) -> np.ndarray:
    """150 values near 70 (none at 195) and 300 values equal to 195: the median is 195."""
    near = np.round(rng.normal(70.0, 5.0, 150), 3)
    return np.concatenate([near, np.full(300, 195.0)])


def test_a_tie_block_at_the_median_is_released_within_one_grid_step() -> None:
    rng = np.random.default_rng(39)
    values = tie_block_at_the_median(rng)
    assert float(np.median(values)) == 195.0
    keys = [f"k{i}" for i in range(RELEASES)]
    # Every key holds the same values, each from its own units (one key per unit).
    all_values = np.tile(values, RELEASES)
    all_keys = np.repeat(np.array(keys), values.size)
    units = np.arange(all_values.size)
    batch = pa.record_batch({"value": all_values, "key": all_keys, "user": units})

    transform = PrivateMedian.PerKey(
        lower=0,
        upper=200,
        num_points=2001,
        epsilon=0.5,
        max_contributions=1,
        max_keys_per_unit=1,
        unit_column="user",
        keys=keys,
    )
    releases = releases_of(transform, batch)

    assert sorted(release.key for release in releases) == sorted(keys)
    for release in releases:
        assert release.ledger.epsilon == 0.5
    near = sum(abs(release.value - 195.0) <= GRID_STEP + 1e-9 for release in releases)
    # Issue 39's bar: at least 95% of 200 releases within one grid step of 195 (each misses
    # with probability below 1e-7, so the bar fails by chance with probability below 1e-5).
    assert near >= 0.95 * RELEASES, f"{near} of {RELEASES} releases within one grid step of 195"
    # The statement as a user reads it: the released median's rank range is within the stated
    # number of ranks of N / 2 beyond the best grid point's, and the best grid point (195)
    # is at distance 0 here. Stated at 95% confidence; each release misses with probability
    # below 1e-7 here, so at least 95% hold.
    ordered = np.sort(values)
    within = 0
    for release in releases:
        low = int(np.searchsorted(ordered, release.value, side="left"))
        high = int(np.searchsorted(ordered, release.value, side="right"))
        distance = max(0.0, low - values.size / 2, values.size / 2 - high)
        within += distance <= release.accuracy["rank_error_beyond_best_grid_point"]
    assert within >= 0.95 * RELEASES, f"{within} of {RELEASES} releases within the statement"
