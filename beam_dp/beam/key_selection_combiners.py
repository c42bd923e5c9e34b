"""The combiner and encoder behind DP key selection (:mod:`beam_dp.beam.key_selection`).

:class:`EncodeLabelsFn` encodes labels read from the data (not public) as their canonical text
(:func:`canonical_label_text`); :class:`KeySelectionFn` counts the distinct units per label and,
in ``extract_output``, thresholds the noisy counts (:mod:`beam_dp.mechanisms.partition_selection`)
and, for ``TopCandidates`` without public candidates, runs the top-k on the selected labels.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa

from beam_dp.accounting import LedgerEntry
from beam_dp.batching import (
    CANDIDATE,
    ColumnBatch,
    canonical_id_text,
    encode_batch,
    num_rows,
    stable_hash64,
)
from beam_dp.batching.columns import EncodeStats, OnBadRecord, as_table, with_source
from beam_dp.batching.hashing import UnitIds
from beam_dp.beam.bounding import is_heartbeat
from beam_dp.beam.selection_spec import SelectionSpec
from beam_dp.errors import BadRecordError, data_error
from beam_dp.mechanisms import RandomSource
from beam_dp.mechanisms.partition_selection import (
    key_selection_threshold,
    select_keys,
    sure_release_count,
)
from beam_dp.mechanisms.randomness import as_random_source
from beam_dp.release import Release
from beam_dp.summaries.counts import LabelCounts

__all__ = [
    "LABEL",
    "MIXED_LABELS_RULE",
    "EncodeLabelsFn",
    "KeySelectionFn",
    "KeySelectionSpec",
    "LabelSummary",
    "canonical_label_text",
]

#: Column of raw candidate labels (an object array) used by DP key selection.
LABEL = "label"


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
    #: With ``max_candidates_per_unit="auto"``: the window's whole epsilon (what the release
    #: is charged), the part that chose the bound, and the public cap; ``epsilon`` is then the
    #: selection's part and ``max_candidates_per_unit`` the chosen bound (:meth:`at_bound`).
    window_epsilon: float | None = None
    choice_epsilon: float | None = None
    cap: int | None = None

    def at_bound(self, bound: int) -> KeySelectionSpec:
        """This spec at a privately chosen ``max_candidates_per_unit``."""
        return dataclasses.replace(self, max_candidates_per_unit=int(bound))

    def release(self, labels: list[Any]) -> Release:
        """The release of the selected label set (its ledger and accuracy)."""
        threshold = key_selection_threshold(self.epsilon, self.delta, self.max_candidates_per_unit)
        bounds = {
            "max_candidates_per_unit": self.max_candidates_per_unit,
            "distinct_candidates": 1,
            "max_windows_per_unit": self.max_windows_per_unit,
        }
        extra: dict[str, float] = {}
        epsilon = self.epsilon
        if self.window_epsilon is not None:
            assert self.choice_epsilon is not None and self.cap is not None
            bounds["max_candidates_cap"] = self.cap
            extra = {"epsilon_bound_choice": self.choice_epsilon, "epsilon_statistic": epsilon}
            epsilon = self.window_epsilon
        entry = LedgerEntry(
            name=self.name,
            statistic="candidate_selection",
            mechanism="partition_selection",
            epsilon=epsilon,
            delta=self.delta,
            sensitivity=1.0,
            neighbouring="add_remove",
            monotone=True,
            # The universe of labels is not public; the released set is, so its size is
            # recorded (at least 1, as the ledger requires).
            num_candidates=max(1, len(labels)),
            contribution_bounds=bounds,
            accuracy={
                **extra,
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
        return self.releases(accumulator, self._spec)

    def releases(self, accumulator: LabelSummary, spec: KeySelectionSpec) -> list[Release]:
        """The selected set at ``spec`` and, with ``top``, the top-k among it."""
        labels = accumulator.counts.labels.to_pylist()
        counts = accumulator.counts.counts
        keep = select_keys(
            counts,
            epsilon=spec.epsilon,
            delta=spec.delta,
            max_keys_per_unit=spec.max_candidates_per_unit,
            rng=spec.rng,
        )
        order = sorted(np.flatnonzero(keep).tolist(), key=lambda i: labels[i])
        selected = [labels[i] for i in order]
        releases = [spec.release(selected)]
        if self._top is not None and selected:
            releases.append(self._top.release(counts[order], selected))
        return releases

    @property
    def spec(self) -> KeySelectionSpec:
        return self._spec

    def display_data(self) -> dict[str, Any]:
        shown: dict[str, Any] = {
            "name": self._spec.name,
            "epsilon": self._spec.epsilon,
            "delta": self._spec.delta,
            "max_candidates_per_unit": self._spec.max_candidates_per_unit,
            "max_windows_per_unit": self._spec.max_windows_per_unit,
        }
        return shown


class AutoKeySelectionFn(KeySelectionFn):
    """:class:`KeySelectionFn` whose output is the merged counts, released at the chosen bound.

    With ``max_candidates_per_unit="auto"`` the threshold needs the privately chosen bound, a
    singleton side input per window; as for the quantiles, a ``Map`` with the side input
    releases (:func:`release_selection_at_choice`), not the combine.
    """

    def extract_output(self, accumulator: LabelSummary) -> LabelSummary:  # type: ignore[override]
        return self.compact(accumulator)

    @property
    def rng(self) -> RandomSource | None:
        """The random source of the bound choice (that of the key selection)."""
        return self.spec.rng


def release_selection_at_choice(
    element: tuple[Any, LabelSummary], choice: Any, fn: AutoKeySelectionFn
) -> tuple[Any, list[Release]]:
    """``(key, merged counts)`` to ``(key, releases)`` at the chosen bound."""
    key, accumulator = element
    return key, fn.releases(accumulator, fn.spec.at_bound(choice.bound))


def _encode_labels(
    batch: Any,
    *,
    unit_column: str | None,
    unit_ids: UnitIds,
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
    out = encode_batch(table, unit_column=unit_column, unit_ids=unit_ids, source=source)
    # Bounding (distinct labels per unit) and the counts use one identity: the label's text
    # as it is (the release shows it, so labels that differ are never merged into one).
    out[CANDIDATE] = stable_hash64(labels, "exact").view(np.int64)
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
        if is_heartbeat(batch):
            return
        encoded = _encode_labels(batch, stats=EncodeStats(), **options)
        if num_rows(encoded):
            yield encoded
