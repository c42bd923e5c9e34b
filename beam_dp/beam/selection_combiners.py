"""The selection family's combiners: each batch reduced with numpy into an integer vector.

:class:`CandidateCountsFn` (distinct units or votes per candidate), :class:`RevenueFn` (a
histogram of one value per unit over a price grid) and :class:`CustomScoreFn` (a user's score
``CombineFn``) merge their vectors by addition and release with the planned
:class:`~beam_dp.summaries.selection.SelectionSpec`, once per key and window; ``.PerKey`` with
``k = 1`` releases many keys with one vectorised exact draw
(:meth:`~beam_dp.summaries.selection.SelectionSpec.release_many`).
:class:`EncodeWithSideCandidatesFn` encodes batches against candidates from a side input. The
transforms that wire them are :mod:`beam_dp.beam.selection`.

Privacy: a combiner sees bounded rows only (the transform bounds contributions first) and
releases through the spec; nothing here logs or raises with a count or a record value.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from fractions import Fraction
from typing import Any, Literal

import apache_beam as beam
import numpy as np
import numpy.typing as npt

from beam_dp.batching import (
    CANDIDATE,
    KEY,
    UNIT,
    VALUE,
    ColumnBatch,
    PublicIndex,
    encode_batch,
    num_rows,
)
from beam_dp.batching.columns import LabelMatch, with_source
from beam_dp.beam._contributions import is_heartbeat
from beam_dp.beam._graph import BatchedSelectFn, split_by_key
from beam_dp.release import Release
from beam_dp.summaries.counts import (
    PerUnitRule,
    at_least_counts,
    candidate_counts,
    merge_into,
    reduce_per_unit,
    threshold_histogram,
)
from beam_dp.summaries.selection import (
    Counts,
    Labels,
    PackedGrid,
    SelectionSpec,
    sorted_labels,
)

__all__ = ["CandidateCountsFn", "CustomScoreFn", "EncodeWithSideCandidatesFn", "RevenueFn"]


class _LabelCache:
    """The sorted labels of a side input, recomputed only when the side input object changes.

    Static labels may be a tuple or a one-dimensional numpy array (a price grid: one buffer to
    pickle instead of a million floats).
    """

    def __init__(self, static: Labels | None) -> None:
        self._static = static
        self._source: Any = None
        self._labels: Labels = ()

    @property
    def static(self) -> Labels | None:
        """The static labels (None: from a side input)."""
        return self._static

    def get(self, args: Sequence[Any]) -> Labels:
        if self._static is not None:
            return self._static
        side = args[0]
        if side is not self._source:
            self._labels = sorted_labels(side)
            self._source = side
        return self._labels

    def __getstate__(self) -> tuple[Labels | None]:
        # A one-element tuple (never falsy, so that copy and pickle call __setstate__).
        return (self._static,)

    def __setstate__(self, state: tuple[Labels | None]) -> None:
        self.__init__(state[0])  # type: ignore[misc]


class _VectorSelectFn(BatchedSelectFn):
    """Base combiner: an int64 vector accumulator that adds per batch and merges by addition.

    Subclasses define the accumulator length, what one batch adds, and the scores. As a
    :class:`~beam_dp.beam._graph.BatchedSelectFn`, ``.PerKey`` transforms release many keys'
    selections at once (:meth:`scores_of`, :meth:`release_batch`) when ``k = 1``.
    """

    def __init__(self, spec: SelectionSpec, labels: Labels | None) -> None:
        super().__init__()
        self._spec = spec
        self._labels = _LabelCache(labels)

    def _size(self, num_candidates: int) -> int:
        return num_candidates

    def _summarise(self, batch: ColumnBatch, num_candidates: int) -> Counts:
        raise NotImplementedError

    def _scores(self, accumulator: Counts) -> Any:
        return accumulator

    def create_accumulator(self, *args: Any) -> Counts:
        return np.zeros(self._size(len(self._labels.get(args))), dtype=np.int64)

    def add_input(self, accumulator: Counts, batch: ColumnBatch, *args: Any) -> Counts:
        if num_rows(batch):
            accumulator += self._summarise(batch, len(self._labels.get(args)))
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[Counts], *args: Any) -> Counts:
        iterator = iter(accumulators)
        return merge_into(next(iterator), iterator)

    def extract_output(self, accumulator: Counts, *args: Any) -> list[Release]:
        labels = self._labels.get(args)
        if len(labels) == 0:  # an empty side input: nothing to select from, nothing released
            return []
        return [self._spec.release(self._scores(accumulator), labels)]

    @property
    def batchable(self) -> bool:
        """One selection per key (``k = 1``): keys can be released in batches."""
        return self._spec.k == 1

    def row_size(self) -> int | None:
        static = self._labels.static
        return None if static is None else self._size(len(static))

    def shard_fn(self, keys_per_shard: int) -> beam.CombineFn:
        return _ShardFn(self, keys_per_shard)

    def _summarise_keys(
        self, batch: ColumnBatch, rows: npt.NDArray[np.int64], accumulator: Counts, n: int
    ) -> None:
        """Add a batch into the rows ``rows`` (one per record: its key's row) of a shard's
        accumulator; by default one key at a time (all of a key's rows together)."""
        keyed = dict(batch)
        keyed[KEY] = rows
        for row, sub in split_by_key(keyed):
            accumulator[row] += self._summarise(sub, n)

    def scores_of(self, accumulator: Counts, *args: Any) -> Any:
        """The merged scores :meth:`extract_output` would select from (None: no candidate)."""
        if len(self._labels.get(args)) == 0:
            return None
        return self._scores(accumulator)

    def release_batch(self, scores: Sequence[Any], *args: Any) -> list[list[Release]]:
        """Each key's releases, as :meth:`extract_output` would give them, drawn together."""
        labels = self._labels.get(args)
        present = [row for row in scores if row is not None]
        releases = iter(self._spec.release_many(present, labels) if len(labels) else [])
        return [[] if row is None else [next(releases)] for row in scores]

    def display_data(self) -> dict[str, Any]:
        return self._spec.display_data()


class CandidateCountsFn(_VectorSelectFn):
    """Rows per candidate: distinct units (heavy hitters) or votes (elections).

    After bounding with distinct candidates (or one vote per unit), or when every record is
    its own unit, the rows naming a candidate are exactly its distinct units or votes, so a
    batch adds ``bincount(candidate)``.

    Args:
        spec: the selection's parameters.
        labels: the public candidates, or None when they come from a side input.
        score: ``"counts"`` (the count itself) or ``"margin"`` (two candidates:
            ``#r - #other``).
    """

    def __init__(
        self,
        spec: SelectionSpec,
        labels: Labels | None,
        score: Literal["counts", "margin"] = "counts",
    ) -> None:
        super().__init__(spec, labels)
        self._score = score

    def _summarise(self, batch: ColumnBatch, num_candidates: int) -> Counts:
        return candidate_counts(batch[CANDIDATE], num_candidates)

    def _summarise_keys(
        self, batch: ColumnBatch, rows: npt.NDArray[np.int64], accumulator: Counts, n: int
    ) -> None:
        # Rows per (key, candidate) at once: the same counts as one bincount per key.
        cells = accumulator.shape[0] * n
        positions = np.asarray(batch[CANDIDATE], dtype=np.int64).ravel()
        if positions.size and (int(positions.min()) < 0 or int(positions.max()) >= n):
            raise ValueError(f"candidate positions must lie in [0, {n})")  # as candidate_counts
        flat = rows * n + positions
        accumulator += np.bincount(flat, minlength=cells).reshape(accumulator.shape)

    def _scores(self, accumulator: Counts) -> Counts:
        if self._score == "margin":
            margin = accumulator[0] - accumulator[1]
            return np.array([margin, -margin], dtype=np.int64)
        return accumulator


class RevenueFn(_VectorSelectFn):
    """Revenue ``p * #{units with x >= p}`` from a histogram of one value per unit.

    The accumulator is the histogram of per-unit values over the price thresholds
    (``len(prices) + 1`` buckets); the number of buyers at each price is a reversed cumulative
    sum of it.

    Args:
        spec: the selection's parameters.
        labels: the prices as release labels (a tuple, or a float array: a large grid then
            pickles as one buffer).
        thresholds: the nearest float of each price, sorted (``x >= price`` exactly when
            ``x >= threshold`` for a decimal price; see ``Revenue``).
        scaled_prices: each price in integer score steps (``price / Revenue.unit``).
        per_unit: how a unit's several values become one (``"min"``, ``"max"``, ``"mean"``);
            None when every record is its own unit.
    """

    def __init__(
        self,
        spec: SelectionSpec,
        labels: Labels,
        thresholds: npt.NDArray[np.float64],
        scaled_prices: Counts,
        per_unit: PerUnitRule | None,
    ) -> None:
        super().__init__(spec, labels)
        self._thresholds = thresholds
        self._scaled_prices = scaled_prices
        self._per_unit = per_unit
        self._packed: PackedGrid | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Beam pickles (and bz2-compresses) a combiner many times while it builds and starts a
        # job: a grid given as START:STOP:STEP (runs of equal steps) goes as a few numbers,
        # not as two arrays of a million entries (seconds per pickle).
        state = dict(self.__dict__)
        state["_packed"] = None
        if self._packed is None:
            self._packed = PackedGrid.pack(self._scaled_prices, self._thresholds)
        if self._packed is not None:
            state["_grid"] = self._packed
            state["_labels_are_thresholds"] = self._labels.static is self._thresholds
            state["_scaled_prices"] = state["_thresholds"] = None
            if state["_labels_are_thresholds"]:
                state["_labels"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        grid = state.pop("_grid", None)
        labels_are_thresholds = state.pop("_labels_are_thresholds", False)
        self.__dict__.update(state)
        if grid is not None:
            self._scaled_prices, self._thresholds = grid.unpack()
            self._packed = grid
            if labels_are_thresholds:
                self._labels = _LabelCache(self._thresholds)

    def _size(self, num_candidates: int) -> int:
        return num_candidates + 1

    def _summarise(self, batch: ColumnBatch, num_candidates: int) -> Counts:
        values = batch[VALUE]
        if self._per_unit is not None:
            values = reduce_per_unit(batch[UNIT], values, self._per_unit)
        return threshold_histogram(values, self._thresholds)

    def _scores(self, accumulator: Counts) -> Any:
        buyers = at_least_counts(accumulator)
        if int(self._scaled_prices[-1]) * int(buyers[0] if buyers.size else 0) < (1 << 61):
            return self._scaled_prices * buyers
        # Beyond int64: exact Python integers (the sampler accepts them).
        return np.array(
            [int(p) * int(b) for p, b in zip(self._scaled_prices, buyers, strict=True)],
            dtype=object,
        )


class _ShardFn(beam.CombineFn):
    """One shard of a ``.PerKey`` selection's keys: a ``(keys_per_shard, size)`` accumulator.

    Row ``i`` is what the per-key combiner's accumulator would be for key
    ``shard * keys_per_shard + i`` (``position % keys_per_shard``); ``extract_output`` gives
    the rows, released by :class:`~beam_dp.beam._graph.ReleaseShardFn`.
    """

    def __init__(self, fn: _VectorSelectFn, keys_per_shard: int) -> None:
        super().__init__()
        self._fn = fn
        self._keys_per_shard = keys_per_shard

    def create_accumulator(self, *args: Any) -> Counts:
        size = self._fn._size(len(self._fn._labels.get(args)))
        return np.zeros((self._keys_per_shard, size), dtype=np.int64)

    def add_input(self, accumulator: Counts, batch: ColumnBatch, *args: Any) -> Counts:
        if num_rows(batch):
            rows = np.asarray(batch[KEY], dtype=np.int64) % self._keys_per_shard
            n = len(self._fn._labels.get(args))
            self._fn._summarise_keys(batch, rows, accumulator, n)
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[Counts], *args: Any) -> Counts:
        iterator = iter(accumulators)
        return merge_into(next(iterator), iterator)

    def extract_output(self, accumulator: Counts, *args: Any) -> Counts:
        return accumulator

    def display_data(self) -> dict[str, Any]:
        return self._fn.display_data()


class CustomScoreFn(beam.CombineFn):
    """Wrap a user's score ``CombineFn``: it accumulates batches, we select on its output.

    The user's combiner receives the same column batches as the built-in ones (every batch
    holds all bounded rows of each unit in it) and its ``extract_output`` must return one score
    per candidate (ints, floats or Fractions). Its accumulator is used as it is.
    """

    def __init__(self, spec: SelectionSpec, labels: tuple[Any, ...], score_fn: beam.CombineFn):
        super().__init__()
        self._spec = spec
        self._labels = labels
        self._score_fn = score_fn

    def setup(self, *args: Any, **kwargs: Any) -> None:
        self._score_fn.setup(*args, **kwargs)

    def teardown(self, *args: Any, **kwargs: Any) -> None:
        self._score_fn.teardown(*args, **kwargs)

    def create_accumulator(self) -> Any:
        return self._score_fn.create_accumulator()

    def add_input(self, accumulator: Any, batch: ColumnBatch) -> Any:
        if not num_rows(batch):
            return accumulator
        return self._score_fn.add_input(accumulator, batch)

    def merge_accumulators(self, accumulators: Iterable[Any]) -> Any:
        return self._score_fn.merge_accumulators(accumulators)

    def compact(self, accumulator: Any) -> Any:
        return self._score_fn.compact(accumulator)

    def extract_output(self, accumulator: Any) -> list[Release]:
        scores = self._score_fn.extract_output(accumulator)
        values = list(scores) if not isinstance(scores, np.ndarray) else scores
        if len(values) != len(self._labels):
            raise ValueError(
                f"the score CombineFn returned {len(values)} scores for "
                f"{len(self._labels)} candidates"
            )
        if not isinstance(values, np.ndarray) and any(isinstance(v, Fraction) for v in values):
            return [self._spec.release(values, self._labels)]
        return [self._spec.release(np.asarray(values), self._labels)]

    def display_data(self) -> dict[str, Any]:
        return {**self._spec.display_data(), "score_fn": type(self._score_fn).__name__}


class EncodeWithSideCandidatesFn(beam.DoFn):
    """Encode batches against candidates that arrive as a side input (a list of labels).

    Labels are put in sorted order (as the combiners do), so positions agree everywhere.
    """

    def __init__(self, options: dict[str, Any], match: LabelMatch) -> None:
        super().__init__()
        self._options = options
        self._match = match
        self._source: Any = None
        self._index: PublicIndex | None = None

    def process(
        self, element: Any, candidates: Sequence[Any], window: Any = beam.DoFn.WindowParam
    ) -> Iterator[ColumnBatch]:
        # Asking for the window (unused) keeps Beam from holding the element after the call
        # (beam_dp.beam._calls).
        del window
        batch, options = with_source(element, self._options)
        if is_heartbeat(batch):
            return
        if candidates is not self._source:
            labels = sorted_labels(candidates)
            # No public candidate: nothing can be selected and nothing is encoded.
            self._index = PublicIndex(labels, self._match) if labels else None
            self._source = candidates
        if self._index is not None:
            encoded = encode_batch(batch, candidates=self._index, **options)
            if num_rows(encoded):
                yield encoded
