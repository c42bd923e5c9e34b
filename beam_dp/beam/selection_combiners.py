"""CombineFns and DoFns behind the selection transforms of :mod:`beam_dp.beam.selection`.

Every combiner follows Beam's contract: the accumulator is a numpy array (or a small
picklable summary), ``merge_accumulators`` modifies only the first accumulator, inputs are
whole column batches reduced with numpy, and ``extract_output`` runs the exact sampler once on
the merged accumulator and returns a list of :class:`~beam_dp.release.Release` (one, or
none when a side input brought no candidate; key selection returns two).

Inputs to the combiners are encoded column batches (:mod:`beam_dp.batching`). When a privacy
unit column is given, every batch holds *all* (bounded) rows of each unit in it: that is what
:class:`~beam_dp.beam.bounding.BoundContributions` outputs, and what makes per-unit
reductions inside ``add_input`` correct. Empty batches (``{}``) are accepted and add nothing;
the transforms inject them so that empty input and keys without data still produce a release.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from fractions import Fraction
from typing import Any, Literal

import apache_beam as beam
import numpy as np
import numpy.typing as npt
import pyarrow as pa
from apache_beam.transforms.window import GlobalWindow

from beam_dp.accounting import LedgerEntry
from beam_dp.batching import (
    CANDIDATE,
    KEY,
    UNIT,
    VALUE,
    ColumnBatch,
    PublicIndex,
    canonical_id_text,
    encode_batch,
    num_rows,
    stable_hash64,
    take,
)
from beam_dp.batching.columns import (
    EncodeStats,
    OnBadRecord,
    as_table,
    with_source,
)
from beam_dp.beam.selection_spec import SelectionSpec, sorted_labels
from beam_dp.errors import BadRecordError, data_error
from beam_dp.mechanisms.partition_selection import (
    key_selection_threshold,
    select_keys,
    sure_release_count,
)
from beam_dp.mechanisms.randomness import RandomSource, as_random_source
from beam_dp.release import Release
from beam_dp.summaries.counts import (
    LabelCounts,
    PerUnitRule,
    at_least_counts,
    candidate_counts,
    merge_into,
    reduce_per_unit,
    threshold_histogram,
)

__all__ = [
    "EMPTY",
    "LABEL",
    "AttachKeyFn",
    "AttachWindowFn",
    "CandidateCountsFn",
    "CustomScoreFn",
    "EncodeLabelsFn",
    "EncodeWithSideCandidatesFn",
    "KeySelectionFn",
    "KeySelectionSpec",
    "LabelSummary",
    "MarkerFn",
    "RevenueFn",
    "split_by_key",
]

#: An empty column batch: adds nothing to any accumulator.
EMPTY: ColumnBatch = {}
#: Column of raw candidate labels (an object array) used by DP key selection.
LABEL = "label"

Counts = npt.NDArray[np.int64]


class _LabelCache:
    """The sorted labels of a side input, recomputed only when the side input object changes."""

    def __init__(self, static: tuple[Any, ...] | None) -> None:
        self._static = static
        self._source: Any = None
        self._labels: tuple[Any, ...] = ()

    def get(self, args: Sequence[Any]) -> tuple[Any, ...]:
        if self._static is not None:
            return self._static
        side = args[0]
        if side is not self._source:
            self._labels = sorted_labels(side)
            self._source = side
        return self._labels

    def __getstate__(self) -> tuple[tuple[Any, ...] | None]:
        # A one-element tuple (never falsy, so that copy and pickle call __setstate__).
        return (self._static,)

    def __setstate__(self, state: tuple[tuple[Any, ...] | None]) -> None:
        self.__init__(state[0])  # type: ignore[misc]


class _VectorSelectFn(beam.CombineFn):
    """Base combiner: an int64 vector accumulator that adds per batch and merges by addition.

    Subclasses define the accumulator length, what one batch adds, and the scores.
    """

    def __init__(self, spec: SelectionSpec, labels: tuple[Any, ...] | None) -> None:
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
        if not labels:  # an empty side input: nothing to select from, nothing released
            return []
        return [self._spec.release(self._scores(accumulator), labels)]

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
        labels: tuple[Any, ...] | None,
        score: Literal["counts", "margin"] = "counts",
    ) -> None:
        super().__init__(spec, labels)
        self._score = score

    def _summarise(self, batch: ColumnBatch, num_candidates: int) -> Counts:
        return candidate_counts(batch[CANDIDATE], num_candidates)

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
        labels: the prices as release labels.
        thresholds: the nearest float of each price, sorted (``x >= price`` exactly when
            ``x >= threshold`` for a decimal price; see ``Revenue``).
        scaled_prices: each price in integer score steps (``price / Revenue.unit``).
        per_unit: how a unit's several values become one (``"min"``, ``"max"``, ``"mean"``);
            None when every record is its own unit.
    """

    def __init__(
        self,
        spec: SelectionSpec,
        labels: tuple[Any, ...],
        thresholds: npt.NDArray[np.float64],
        scaled_prices: Counts,
        per_unit: PerUnitRule | None,
    ) -> None:
        super().__init__(spec, labels)
        self._thresholds = thresholds
        self._scaled_prices = scaled_prices
        self._per_unit = per_unit

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


@dataclasses.dataclass(frozen=True)
class KeySelectionSpec:
    """Parameters of DP key selection (thresholding of noisy distinct-unit counts)."""

    name: str
    epsilon: float
    delta: float
    max_candidates_per_unit: int
    confidence: float = 0.95
    rng: RandomSource | None = None
    max_windows_per_unit: int = 1

    def release(self, labels: list[Any]) -> Release:
        """The release of the selected label set (its ledger and accuracy)."""
        threshold = key_selection_threshold(self.epsilon, self.delta, self.max_candidates_per_unit)
        entry = LedgerEntry(
            name=self.name,
            statistic="candidate_selection",
            mechanism="partition_selection",
            epsilon=self.epsilon,
            delta=self.delta,
            sensitivity=1.0,
            neighbouring="add_remove",
            monotone=True,
            # The universe of labels is not public; the released set is, so its size is
            # recorded (at least 1, as the ledger requires).
            num_candidates=max(1, len(labels)),
            contribution_bounds={
                "max_candidates_per_unit": self.max_candidates_per_unit,
                "distinct_candidates": 1,
                "max_windows_per_unit": self.max_windows_per_unit,
            },
            accuracy={
                "confidence": self.confidence,
                "release_threshold": float(threshold),
                "count_released_with_confidence": float(
                    sure_release_count(
                        self.epsilon,
                        self.delta,
                        self.max_candidates_per_unit,
                        self.confidence,
                    )
                ),
            },
        )
        return Release(value=labels, ledger=entry, rng_secure=as_random_source(self.rng).secure)


#: The rule broken when one candidate column holds labels of two kinds that cannot merge.
MIXED_LABELS_RULE = "rule: candidate labels must be integers or text, in every file and batch"

_INTEGER = "integer"
_TEXT = "string"


def _label_kind(labels: pa.Array) -> str:
    """``"integer"``, ``"string"`` or the Arrow type's name."""
    if pa.types.is_integer(labels.type):
        return _INTEGER
    if pa.types.is_string(labels.type) or pa.types.is_large_string(labels.type):
        return _TEXT
    return str(labels.type)


def _mixed_labels(field: str) -> BadRecordError:
    # Built from the field and the rule only: Arrow's own message quotes a label.
    return data_error("input", MIXED_LABELS_RULE, field=field)


@dataclasses.dataclass
class LabelSummary:
    """Key selection's accumulator: the label counts and the one kind of label they hold.

    A candidate column that holds integers in some batches and text in others is read as
    text throughout (an integer as its decimal text, so ``7`` and ``"7"`` are one label), as
    :func:`beam_dp.batching.columns.as_table` reads a field that mixes types within one
    batch: the labels never depend on how the rows were split into batches or on the order
    in which batches merge. Other mixtures are refused (:data:`MIXED_LABELS_RULE`).
    """

    counts: LabelCounts = dataclasses.field(default_factory=LabelCounts)
    kind: str | None = None

    def as_text(self) -> None:
        """Turn integer labels into their decimal text (in place)."""
        if self.kind != _INTEGER:
            return
        labels, counts = self.counts.labels, self.counts.counts
        self.counts = LabelCounts()
        if len(labels):
            self.counts.add(labels.cast(pa.string()), counts)
        self.kind = _TEXT

    def to_dict(self) -> dict[Any, int]:
        """``{label: count}`` (for tests and small summaries)."""
        return self.counts.to_dict()


def _agree(first: LabelSummary, kind: str | None, field: str) -> str | None:
    """Bring ``first`` to the kind both sides share; return it (None: nothing yet)."""
    if kind is None or first.kind == kind:
        return first.kind
    if first.kind is None:
        first.kind = kind
        return kind
    if {first.kind, kind} == {_INTEGER, _TEXT}:
        first.as_text()
        return _TEXT
    raise _mixed_labels(field)


class KeySelectionFn(beam.CombineFn):
    """Distinct-unit counts per label read from the data, then DP key selection.

    The accumulator is a :class:`LabelSummary` around a
    :class:`~beam_dp.summaries.counts.LabelCounts`. ``extract_output`` keeps the labels whose
    noisy count clears the threshold and returns a list of releases: the selected set and,
    when ``top`` is given, the top-k selection among the selected labels (on the same counts;
    the selected set is public by then).

    Args:
        spec: the key selection's parameters.
        top: the selection among the selected labels, or None.
        field: the candidate column (named in errors).

    Raises:
        BadRecordError: when labels of kinds that cannot merge meet (the message names the
            field and the rule, never a label). Integers and text merge as text.
    """

    def __init__(
        self, spec: KeySelectionSpec, top: SelectionSpec | None, field: str = "candidate"
    ) -> None:
        super().__init__()
        self._spec = spec
        self._top = top
        self._field = field

    def create_accumulator(self) -> LabelSummary:
        return LabelSummary()

    def add_input(self, accumulator: LabelSummary, batch: ColumnBatch) -> LabelSummary:
        if not num_rows(batch):
            return accumulator
        try:
            labels = pa.array(batch[LABEL])
            kind = _label_kind(labels)
            if _agree(accumulator, kind, self._field) != kind:
                labels = labels.cast(pa.string())  # integers meet text: decimal text
            accumulator.counts.add(labels)
        except pa.ArrowException:
            raise _mixed_labels(self._field) from None
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[LabelSummary]) -> LabelSummary:
        iterator = iter(accumulators)
        first = next(iterator)
        for other in iterator:
            try:
                if _agree(first, other.kind, self._field) != other.kind:
                    other = LabelSummary(LabelCounts().merge([other.counts]), other.kind)
                    other.as_text()  # a copy: the other accumulators are not modified
                first.counts.merge([other.counts])
            except pa.ArrowException:
                raise _mixed_labels(self._field) from None
        return first

    def compact(self, accumulator: LabelSummary) -> LabelSummary:
        accumulator.counts.compact()
        return accumulator

    def extract_output(self, accumulator: LabelSummary) -> list[Release]:
        labels = accumulator.counts.labels.to_pylist()
        counts = accumulator.counts.counts
        keep = select_keys(
            counts,
            epsilon=self._spec.epsilon,
            delta=self._spec.delta,
            max_keys_per_unit=self._spec.max_candidates_per_unit,
            rng=self._spec.rng,
        )
        order = sorted(np.flatnonzero(keep).tolist(), key=lambda i: labels[i])
        selected = [labels[i] for i in order]
        releases = [self._spec.release(selected)]
        if self._top is not None and selected:
            releases.append(self._top.release(counts[order], selected))
        return releases

    def display_data(self) -> dict[str, Any]:
        shown: dict[str, Any] = {
            "name": self._spec.name,
            "epsilon": self._spec.epsilon,
            "delta": self._spec.delta,
            "max_candidates_per_unit": self._spec.max_candidates_per_unit,
            "max_windows_per_unit": self._spec.max_windows_per_unit,
        }
        return shown


class MarkerFn(beam.CombineFn):
    """One ``None`` per window that holds any element (to inject public keys there)."""

    def create_accumulator(self) -> None:
        return None

    def add_input(self, accumulator: None, element: Any) -> None:
        return None

    def merge_accumulators(self, accumulators: Iterable[None]) -> None:
        return None

    def extract_output(self, accumulator: None) -> None:
        return None


def split_by_key(batch: ColumnBatch) -> Iterator[tuple[int, ColumnBatch]]:
    """Split a batch by its ``KEY`` column into ``(key position, sub-batch)`` pairs.

    Every unit's rows for one key stay together, so per-unit reductions remain correct.
    """
    if not num_rows(batch) or KEY not in batch:
        return
    keys = batch[KEY]
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    boundaries = np.flatnonzero(sorted_keys[1:] != sorted_keys[:-1]) + 1
    for rows in np.split(order, boundaries):
        yield int(keys[rows[0]]), take(batch, rows)


class AttachKeyFn(beam.DoFn):
    """``(key position, releases)`` to the releases labelled with their public key."""

    def __init__(self, keys: tuple[Any, ...]) -> None:
        super().__init__()
        self._keys = keys

    def process(self, element: tuple[int, list[Release]]) -> Iterator[Release]:
        position, releases = element
        for release in releases:
            yield dataclasses.replace(release, key=self._keys[position])


class AttachWindowFn(beam.DoFn):
    """Record the window of each release (nothing for the global window)."""

    def process(self, release: Release, window: Any = beam.DoFn.WindowParam) -> Iterator[Release]:
        if isinstance(window, GlobalWindow) or not hasattr(window, "start"):
            yield release
        else:
            bounds = f"[{window.start.to_rfc3339()}, {window.end.to_rfc3339()})"
            yield dataclasses.replace(release, window=bounds)


class EncodeWithSideCandidatesFn(beam.DoFn):
    """Encode batches against candidates that arrive as a side input (a list of labels).

    Labels are put in sorted order (as the combiners do), so positions agree everywhere.
    """

    def __init__(self, options: dict[str, Any]) -> None:
        super().__init__()
        self._options = options
        self._source: Any = None
        self._index: PublicIndex | None = None

    def process(self, element: Any, candidates: Sequence[Any]) -> Iterator[ColumnBatch]:
        batch, options = with_source(element, self._options)
        if candidates is not self._source:
            labels = sorted_labels(candidates)
            # No public candidate: nothing can be selected and nothing is encoded.
            self._index = PublicIndex(labels) if labels else None
            self._source = candidates
        if self._index is not None:
            encoded = encode_batch(batch, candidates=self._index, **options)
            if num_rows(encoded):
                yield encoded


def _encode_labels(
    batch: Any,
    *,
    unit_column: str | None,
    candidate_column: str,
    on_bad_record: OnBadRecord,
    source: str,
    stats: EncodeStats,
) -> ColumnBatch:
    """Encode for key selection: unit hash, label hash (for bounding) and the raw labels.

    A null unit or label is a bad record (``on_bad_record``); messages name the field and the
    rule, never a value.
    """
    try:
        table = as_table(batch)
    except pa.ArrowException:  # Arrow's message quotes the value it could not convert
        raise data_error(
            source, "rule: each field must hold values of one type (e.g. all strings)"
        ) from None
    stats.rows_read += table.num_rows
    fields = [candidate_column] if unit_column is None else [unit_column, candidate_column]
    bad = np.zeros(table.num_rows, dtype=bool)
    for name in fields:
        if name not in table.schema.names:
            raise data_error(source, "rule: the field is required", field=name)
        nulls = table.column(name).null_count
        if nulls and on_bad_record == "fail":
            raise data_error(
                source,
                "rule: the field must not be null; use on_bad_record='skip' to drop such records",
                field=name,
            )
        if nulls:
            bad |= table.column(name).is_null().to_numpy(zero_copy_only=False)
    if bad.any():
        stats.bad_records += int(bad.sum())
        table = table.filter(pa.array(~bad))
    column = table.column(candidate_column)
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    labels = canonical_label_text(column)
    bad = np.asarray(labels.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    if bad.any():
        if on_bad_record == "fail":
            raise data_error(
                source,
                "rule: candidate labels must be integers or text (a whole number, or valid "
                "UTF-8); use on_bad_record='skip' to drop such records",
                field=candidate_column,
            )
        stats.bad_records += int(bad.sum())
        keep = pa.array(~bad)
        table, labels = table.filter(keep), labels.filter(keep)
    out = encode_batch(table, unit_column=unit_column, source=source)
    # Bounding (distinct labels per unit) and the counts use one identity: the canonical text.
    out[CANDIDATE] = stable_hash64(labels).view(np.int64)
    out[LABEL] = labels.to_numpy(zero_copy_only=False)
    return out


def canonical_label_text(column: pa.Array) -> pa.Array:
    """Labels read from the data as their canonical text; null where a label is not valid.

    Key selection counts labels by the identity privacy units have
    (:mod:`beam_dp.batching.hashing`): an integer and its decimal text are one label (``7``
    and ``"7"``), so labels are released as text. The rule looks at each value alone, so the
    labels never depend on how rows were split into batches or files, or on merge order.
    """
    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    if pa.types.is_string(column.type):
        return column
    if pa.types.is_large_string(column.type):
        return column.cast(pa.string())
    if pa.types.is_integer(column.type):
        return column.cast(pa.string())
    return pa.array([canonical_id_text(value) for value in column.to_pylist()], type=pa.string())


class EncodeLabelsFn(beam.DoFn):
    """Reader output to column batches for DP key selection (labels are not public)."""

    def __init__(self, options: dict[str, Any]) -> None:
        super().__init__()
        self._options = options

    def process(self, element: Any) -> Iterator[ColumnBatch]:
        batch, options = with_source(element, self._options)
        encoded = _encode_labels(batch, stats=EncodeStats(), **options)
        if num_rows(encoded):
            yield encoded
