"""Rows or keys per unit, and re-bounding at a chosen bound: the Beam side of ``"auto"`` bounds.

:func:`rows_per_unit_histogram` (``max_contributions="auto"``) and
:func:`keys_per_unit_histogram` (``max_keys_per_unit="auto"``), merged by
:class:`CountHistogramFn`, give the exact histogram that
:func:`beam_dp.summaries.contribution_bounds.choose_bound` privately chooses a bound from;
:func:`rebound_rows` and :func:`rebound_keys` keep a uniform sample at the chosen bound of
what was already bounded at the public cap.
"""

from __future__ import annotations

from collections.abc import Iterable

import apache_beam as beam
import numpy as np
import numpy.typing as npt

from beam_dp.batching import KEY, UNIT, ColumnBatch, ContributionBounds, bound_rows, num_rows

__all__ = [
    "CountHistogramFn",
    "keys_per_unit_histogram",
    "rebound_keys",
    "rebound_rows",
    "rows_per_unit_histogram",
]


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


def keys_per_unit_histogram(batch: ColumnBatch, cap: int) -> npt.NDArray[np.int64]:
    """How many units of ``batch`` hold rows of ``c`` distinct keys, ``c`` capped at ``cap``.

    ``batch`` must hold every row of its units (all their keys, per window): the batches out
    of :class:`BoundContributions`, *before* they are split by key. Each unit adds exactly
    one count, so the histogram of neighbours differs by one count (add/remove) or moves one
    count (replace). Returns an int64 array of length ``cap + 1``.

    **Privacy:** exact counts: the input of a private bound choice, never released as such.
    """
    histogram = np.zeros(int(cap) + 1, dtype=np.int64)
    if not num_rows(batch) or UNIT not in batch or KEY not in batch:
        return histogram
    pairs = np.unique(np.stack([batch[UNIT].view(np.int64), batch[KEY].astype(np.int64)]), axis=1)
    _, keys = np.unique(pairs[0], return_counts=True)
    histogram += np.bincount(np.minimum(keys, int(cap)), minlength=int(cap) + 1)
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


def rebound_keys(batch: ColumnBatch, max_keys_per_unit: int, salt: int) -> ColumnBatch:
    """Keep the rows of ``max_keys_per_unit`` keys of every unit of ``batch``, chosen uniformly.

    For batches that hold every row of their units, already bounded at a larger key cap by
    :class:`BoundContributions`: a uniform subset of a uniform subset of a unit's keys is a
    uniform subset of ``min(keys, max_keys_per_unit)`` of them; rows per kept key are as
    they were.

    **Privacy:** a function of each unit's own rows and the salt, as :func:`bound_rows`.
    """
    if not num_rows(batch):
        return batch
    bounds = ContributionBounds(
        max_contributions_per_unit=None, max_keys_per_unit=int(max_keys_per_unit)
    )
    return bound_rows(batch, bounds, salt)
