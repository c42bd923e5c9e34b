"""Privacy units to shards, and the bounding of one shard: the numpy core of the shuffle.

:func:`split_to_shards` splits a batch by the stable hash of its units (``UNIT`` column) into
at most ``num_shards`` sub-batches, so that a ``GroupByKey`` brings every row of a unit to
one shard; :class:`BoundShardFn` bounds a shard's rows with
:func:`beam_dp.batching.bound_rows`. Used by :class:`~beam_dp.beam.bounding.BoundContributions`
and the window bounds of :mod:`beam_dp.beam.window_bounds`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import apache_beam as beam
import numpy as np
from apache_beam.metrics.metric import Metrics

from beam_dp.batching import (
    UNIT,
    ColumnBatch,
    ContributionBounds,
    bound_rows,
    concat_batches,
    num_rows,
    take,
)
from beam_dp.telemetry import exact_counts_enabled

__all__ = ["NAMESPACE", "BoundShardFn", "BoundingCounts", "split_to_shards"]

#: The metrics namespace of every exact (not private, switched-on) count.
NAMESPACE = "beam_dp"


def split_to_shards(batch: ColumnBatch, num_shards: int) -> Iterator[tuple[int, ColumnBatch]]:
    # 16-bit shard ids sort with numpy's linear-time radix sort.
    shard = (batch[UNIT] % np.uint64(num_shards)).astype(
        np.uint16 if num_shards <= 1 << 16 else np.int64
    )
    order = np.argsort(shard, kind="stable")
    sorted_shards = shard[order]
    boundaries = np.flatnonzero(np.diff(sorted_shards)) + 1
    for rows in np.split(order, boundaries):
        if rows.size:
            yield int(shard[rows[0]]), take(batch, rows)


class BoundingCounts:
    """The exact rows kept and dropped by a bounding step, as metrics.

    Built in a DoFn's ``__init__`` (in the driver) and pickled with it, so the operator's
    switch read here holds on every worker. NOT PRIVATE: without the switch nothing is counted.
    """

    def __init__(self) -> None:
        self._enabled = exact_counts_enabled()
        if self._enabled:
            self._kept = Metrics.counter(NAMESPACE, "rows_kept_after_bounding")
            self._dropped = Metrics.counter(NAMESPACE, "rows_dropped_by_bounding")

    def record(self, kept: int, total: int) -> None:
        """Count ``kept`` rows of ``total`` as kept and the rest as dropped (switch on only)."""
        if self._enabled:  # NOT PRIVATE: only behind the operator's switch
            self._kept.inc(kept)
            self._dropped.inc(total - kept)


class BoundShardFn(beam.DoFn):
    def __init__(self, bounds: ContributionBounds, salt: int):
        super().__init__()
        self._bounds = bounds
        self._salt = salt
        self._counts = BoundingCounts()

    def process(self, element: tuple[int, Iterable[ColumnBatch]]) -> Iterator[ColumnBatch]:
        _, batches = element
        rows = concat_batches(batches)
        bounded = bound_rows(rows, self._bounds, self._salt)
        kept = num_rows(bounded)
        self._counts.record(kept, num_rows(rows))
        if kept:
            yield bounded
