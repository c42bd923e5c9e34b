"""Reader output to encoded column batches on Beam (:class:`EncodeBatches`).

Each element (a pyarrow RecordBatch or Table, a mapping of columns, a list of dicts, or a
``(file name, batch)`` pair) is encoded by :func:`beam_dp.batching.encode_batch`: the privacy
unit becomes its stable hash, candidates and keys their positions in the public lists, and bad
records fail or are skipped by one rule. A heartbeat (:func:`is_heartbeat`) is not encoded.

**Telemetry.** By default nothing data-dependent reaches a metric or a log line; exact counts
(rows read, bad records skipped, records with an unknown candidate or key) are Beam metrics in
the ``beam_dp`` namespace only behind :func:`beam_dp.telemetry.enable_exact_counts`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any, Unpack

import apache_beam as beam
from apache_beam.metrics.metric import Metrics
from apache_beam.pvalue import PCollection

from beam_dp.batching import ColumnBatch, encode_batch, num_rows
from beam_dp.batching.columns import EncodeOptions, EncodeStats, encode_options, with_source
from beam_dp.telemetry import exact_counts_enabled

__all__ = ["EncodeBatches", "is_heartbeat"]

_NAMESPACE = "beam_dp"
_PROGRESS_EVERY = 1_000_000
_LOG = logging.getLogger(__name__)


def is_heartbeat(batch: object) -> bool:
    """Whether ``batch`` is a heartbeat: an element with no columns and no rows (``{}``,
    ``[]``). It holds no record, so it is not encoded; it only marks its window, which then
    releases (:func:`beam_dp.beam.plan.window_markers`)."""
    return isinstance(batch, (Mapping, list, tuple)) and len(batch) == 0


class _EncodeFn(beam.DoFn):
    def __init__(self, options: dict[str, Any]):
        super().__init__()
        self._options = options
        # Read in the driver and pickled with the DoFn: the setting holds on every worker.
        self._exact_counts = exact_counts_enabled()
        self._seen = 0
        self._next_report = _PROGRESS_EVERY
        if self._exact_counts:
            self._rows = Metrics.counter(_NAMESPACE, "rows_read")
            self._bad = Metrics.counter(_NAMESPACE, "bad_records_skipped")
            self._unknown = Metrics.counter(_NAMESPACE, "records_with_unknown_candidate_or_key")

    def process(self, element: Any) -> Iterator[ColumnBatch]:
        batch, options = with_source(element, self._options)
        if is_heartbeat(batch):
            return
        stats = EncodeStats()
        encoded = encode_batch(batch, stats=stats, **options)
        if self._exact_counts:  # NOT PRIVATE: only behind the operator's switch
            self._report(stats)
        if num_rows(encoded):
            yield encoded

    def _report(self, stats: EncodeStats) -> None:
        self._rows.inc(stats.rows_read)
        self._seen += stats.rows_read
        if self._seen >= self._next_report:
            _LOG.info("encoded %d rows so far on this worker (exact counts are on)", self._seen)
            self._next_report *= 2
        if stats.bad_records:
            self._bad.inc(stats.bad_records)
        if stats.unknown_labels:
            self._unknown.inc(stats.unknown_labels)


class EncodeBatches(beam.PTransform):
    """Reader output (RecordBatches, Tables, lists of dicts) to encoded column batches.

    Elements may also be ``(file name, batch)`` pairs, as :class:`beam_dp.io.ReadExport`
    emits them; errors then name the file.

    See :func:`beam_dp.batching.encode_batch` for the arguments and the bad-record rules.
    No value is ever logged. Exact counts (rows read, records skipped) are reported as Beam
    metrics in the ``beam_dp`` namespace only when
    :func:`beam_dp.telemetry.enable_exact_counts` was called before this transform was built
    (they are not private); by default nothing data-dependent is reported.
    """

    def __init__(self, **options: Unpack[EncodeOptions]):
        super().__init__()
        self._options: dict[str, Any] = encode_options(options)

    def expand(self, pcoll: PCollection) -> PCollection:
        return pcoll | beam.ParDo(_EncodeFn(self._options))
