"""Beam transforms that encode reader output and bound each privacy unit's contributions.

Batches, not rows, move through the shuffle: each input batch is split by the stable hash of
its privacy units into at most ``num_shards`` sub-batches keyed by shard; a ``GroupByKey``
brings every row of a unit to one shard, whatever file, worker or process it came from; the
shard's rows are concatenated and bounded with numpy (:func:`beam_dp.batching.bound_rows`).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.metrics.metric import Metrics
from apache_beam.pvalue import PCollection

from beam_dp.batching import (
    UNIT,
    ColumnBatch,
    ContributionBounds,
    PublicIndex,
    bound_rows,
    concat_batches,
    encode_batch,
    num_rows,
    take,
)
from beam_dp.batching.columns import EncodeStats, OnBadRecord, with_source

__all__ = ["BoundContributions", "EncodeBatches"]

_NAMESPACE = "beam_dp"
_PROGRESS_EVERY = 1_000_000
_LOG = logging.getLogger(__name__)


class _EncodeFn(beam.DoFn):
    def __init__(self, options: dict[str, Any]):
        super().__init__()
        self._options = options
        self._rows = Metrics.counter(_NAMESPACE, "rows_read")
        self._bad = Metrics.counter(_NAMESPACE, "bad_records_skipped")
        self._unknown = Metrics.counter(_NAMESPACE, "records_with_unknown_candidate_or_key")
        self._seen = 0
        self._next_report = _PROGRESS_EVERY

    def process(self, element: Any) -> Iterator[ColumnBatch]:
        batch, options = with_source(element, self._options)
        stats = EncodeStats()
        encoded = encode_batch(batch, stats=stats, **options)
        self._rows.inc(stats.rows_read)
        self._seen += stats.rows_read
        if self._seen >= self._next_report:  # progress of long jobs: aggregate counts only
            _LOG.info("encoded %d rows so far on this worker", self._seen)
            self._next_report *= 2
        if stats.bad_records:
            self._bad.inc(stats.bad_records)
        if stats.unknown_labels:
            self._unknown.inc(stats.unknown_labels)
        if num_rows(encoded):
            yield encoded


class EncodeBatches(beam.PTransform):
    """Reader output (RecordBatches, Tables, lists of dicts) to encoded column batches.

    Elements may also be ``(file name, batch)`` pairs, as :class:`beam_dp.io.ReadExport`
    emits them; errors then name the file.

    See :func:`beam_dp.batching.encode_batch` for the arguments and the bad-record rules.
    Aggregate counts (rows read, records skipped) are reported as Beam metrics in the
    ``beam_dp`` namespace; no value is ever logged.
    """

    def __init__(
        self,
        *,
        unit_column: str | None,
        candidate_column: str | None = None,
        candidates: PublicIndex | None = None,
        value_column: str | None = None,
        key_column: str | None = None,
        keys: PublicIndex | None = None,
        on_bad_record: OnBadRecord = "fail",
        source: str = "input",
    ):
        super().__init__()
        if on_bad_record not in ("fail", "skip"):
            raise ValueError(
                f"'on_bad_record' must be 'fail' or 'skip'; received {on_bad_record!r}"
            )
        self._options: dict[str, Any] = {
            "unit_column": unit_column,
            "candidate_column": candidate_column,
            "candidates": candidates,
            "value_column": value_column,
            "key_column": key_column,
            "keys": keys,
            "on_bad_record": on_bad_record,
            "source": source,
        }

    def expand(self, pcoll: PCollection) -> PCollection:
        return pcoll | beam.ParDo(_EncodeFn(self._options))


def _split_to_shards(batch: ColumnBatch, num_shards: int) -> Iterator[tuple[int, ColumnBatch]]:
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


class _BoundShardFn(beam.DoFn):
    def __init__(self, bounds: ContributionBounds, salt: int):
        super().__init__()
        self._bounds = bounds
        self._salt = salt
        self._kept = Metrics.counter(_NAMESPACE, "rows_kept_after_bounding")
        self._dropped = Metrics.counter(_NAMESPACE, "rows_dropped_by_bounding")

    def process(self, element: tuple[int, Iterable[ColumnBatch]]) -> Iterator[ColumnBatch]:
        _, batches = element
        rows = concat_batches(batches)
        bounded = bound_rows(rows, self._bounds, self._salt)
        kept = num_rows(bounded)
        self._kept.inc(kept)
        self._dropped.inc(num_rows(rows) - kept)
        if kept:
            yield bounded


class BoundContributions(beam.PTransform):
    """Enforce per-unit contribution bounds on encoded column batches.

    Args:
        bounds: the bounds to enforce.
        num_shards: how many groups the units are hashed into (the parallelism of the
            bounding step; every row of a unit lands in one group).
        salt: decides which rows survive a bound; random per pipeline by default. It is not a
            privacy parameter (any per-unit rule is private) and is never released.

    Output: column batches in which every unit's rows are together and within ``bounds``.
    On windowed input the bounds hold per window: a unit present in several windows
    contributes up to the bounds in each of them.
    """

    def __init__(
        self, bounds: ContributionBounds, *, num_shards: int = 32, salt: int | None = None
    ):
        super().__init__()
        if isinstance(num_shards, bool) or not isinstance(num_shards, int) or num_shards < 1:
            raise ValueError(f"'num_shards' must be an integer >= 1; received {num_shards!r}")
        self._bounds = bounds
        self._num_shards = num_shards
        self._salt = secrets.randbits(64) if salt is None else int(salt)

    def expand(self, pcoll: PCollection) -> PCollection:
        return (
            pcoll
            | "SplitByUnitShard" >> beam.FlatMap(_split_to_shards, self._num_shards)
            | "GroupUnits" >> beam.GroupByKey()
            | "Bound" >> beam.ParDo(_BoundShardFn(self._bounds, self._salt))
        )

    def display_data(self) -> dict[str, Any]:
        return {"bounds": str(self._bounds.to_dict()), "num_shards": self._num_shards}
