"""Rows per unit, and re-bounding at a chosen bound: the Beam side of ``max_contributions="auto"``.

:func:`rows_per_unit_histogram` and :class:`CountHistogramFn` give the exact histogram of rows
per (unit, key) that :func:`beam_dp.summaries.contribution_bounds.choose_bound` privately
chooses a bound from; :func:`rebound_rows` keeps a uniform sample at the chosen bound of rows
already bounded at the public cap.
"""

from __future__ import annotations

from collections.abc import Iterable

import apache_beam as beam
import numpy as np
import numpy.typing as npt

from beam_dp.batching import KEY, UNIT, ColumnBatch, ContributionBounds, bound_rows, num_rows

__all__ = ["CountHistogramFn", "rebound_rows", "rows_per_unit_histogram"]


def rows_per_unit_histogram(batch: ColumnBatch, cap: int) -> npt.NDArray[np.int64]:
    """How many (unit, key) groups of ``batch`` hold ``c`` rows, ``c`` capped at ``cap``.

    ``batch`` must hold every row of its units (per key, per window), as the batches out of
    :class:`BoundContributions` do (and their per-key splits). Without a ``KEY`` column a
    group is a unit. Returns an int64 array of length ``cap + 1`` (index 0 is always 0).

    **Privacy:** exact counts: the input of a private bound choice
    (:func:`beam_dp.summaries.contribution_bounds.choose_bound`), never released as such.
    """
    histogram = np.zeros(int(cap) + 1, dtype=np.int64)
    if not num_rows(batch) or UNIT not in batch:
        return histogram
    if KEY in batch:
        pairs = np.stack([batch[UNIT].view(np.int64), batch[KEY].astype(np.int64)])
        _, counts = np.unique(pairs, axis=1, return_counts=True)
    else:
        _, counts = np.unique(batch[UNIT], return_counts=True)
    histogram += np.bincount(np.minimum(counts, int(cap)), minlength=int(cap) + 1)
    return histogram


class CountHistogramFn(beam.CombineFn):
    """The sum of rows-per-unit histograms of one length (``cap + 1``): an exact merge."""

    def __init__(self, cap: int) -> None:
        super().__init__()
        self._cap = int(cap)

    def create_accumulator(self) -> npt.NDArray[np.int64]:
        return np.zeros(self._cap + 1, dtype=np.int64)

    def add_input(
        self, accumulator: npt.NDArray[np.int64], element: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.int64]:
        accumulator += element
        return accumulator

    def merge_accumulators(
        self, accumulators: Iterable[npt.NDArray[np.int64]]
    ) -> npt.NDArray[np.int64]:
        iterator = iter(accumulators)
        first = next(iterator)
        for other in iterator:
            first += other
        return first

    def extract_output(self, accumulator: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        return accumulator


def rebound_rows(batch: ColumnBatch, max_contributions: int, salt: int) -> ColumnBatch:
    """Keep a uniform sample of ``max_contributions`` rows of every (unit, key) of ``batch``.

    For batches already bounded at a larger cap by :class:`BoundContributions` (which keeps
    a uniform sample of at most the cap rows): a uniform sample of a uniform sample is a
    uniform sample of ``min(rows, max_contributions)`` of the unit's rows.

    **Privacy:** a function of each unit's own rows and the salt, as :func:`bound_rows`.
    """
    if not num_rows(batch):
        return batch
    return bound_rows(
        batch, ContributionBounds(max_contributions_per_unit=int(max_contributions)), salt
    )
