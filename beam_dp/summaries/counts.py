"""Mergeable per-candidate count summaries for selection (pure numpy and pyarrow; no Beam).

Every summary here is an exact integer accumulator that merges by addition, so a score computed
from the merged summary is the same on one core or a thousand. The Beam combiners of
:mod:`beam_dp.beam.selection` hold these as their accumulators:

* :func:`candidate_counts`: how many rows name each candidate (after contribution bounding with
  distinct candidates, that is the number of distinct privacy units per candidate).
* :func:`reduce_per_unit`: one value per privacy unit (its ``min``, ``max`` or ``mean``), for
  scores defined on one value per unit such as revenue.
* :func:`threshold_histogram` and :func:`at_least_counts`: a histogram of values over a sorted
  public grid of thresholds, and from it ``#{x >= t}`` for every threshold (the buyers at each
  price of a revenue score).
* :func:`merge_into`: the in-place merge of count vectors (only the first one is modified).
* :class:`LabelCounts`: counts keyed by labels read from the data, for DP key selection when the
  candidates are not public. Keys are the labels themselves (never a hash), so two labels can
  never be merged by accident; labels of mixed types follow one canonical rule (integers,
  strings and bytes are distinct kinds) and never raise.

Functions validate their public arguments (sizes, rules) and never put a data value in an error.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from beam_dp.errors import data_error

__all__ = [
    "LABEL_KINDS",
    "PER_UNIT_RULES",
    "LabelCounts",
    "LabelKind",
    "PerUnitRule",
    "at_least_counts",
    "candidate_counts",
    "label_sort_key",
    "merge_into",
    "reduce_per_unit",
    "threshold_histogram",
]

Counts = npt.NDArray[np.int64]
PerUnitRule = Literal["min", "max", "mean"]
PER_UNIT_RULES: tuple[PerUnitRule, ...] = ("min", "max", "mean")


def candidate_counts(candidates: npt.ArrayLike, num_candidates: int) -> Counts:
    """Count the rows naming each candidate.

    Args:
        candidates: candidate positions in ``[0, num_candidates)`` (int64).
        num_candidates: the number of public candidates.

    Returns:
        int64 array of length ``num_candidates``.

    Raises:
        ValueError: if a position is outside ``[0, num_candidates)``.
    """
    positions = np.asarray(candidates, dtype=np.int64).ravel()
    if positions.size and (int(positions.min()) < 0 or int(positions.max()) >= num_candidates):
        raise ValueError(f"candidate positions must lie in [0, {num_candidates})")
    return np.bincount(positions, minlength=num_candidates).astype(np.int64, copy=False)


def merge_into(first: Counts, others: Iterable[Counts]) -> Counts:
    """Add every array of ``others`` into ``first`` in place and return ``first``.

    This is the merge of Beam's ``CombineFn`` contract: only the first accumulator is modified.
    """
    for other in others:
        if other.shape != first.shape:
            raise ValueError(
                f"cannot merge count vectors of shapes {first.shape} and {other.shape}"
            )
        first += other
    return first


def _unit_groups(
    units: npt.NDArray[Any], values: npt.NDArray[np.float64]
) -> tuple[npt.NDArray[np.intp], npt.NDArray[Any]]:
    """An order that puts each unit's rows together, sorted by value within a unit (so a
    unit's mean is summed in the same order whatever order its rows arrived in), and where
    each unit starts."""
    order = np.lexsort((values, units))
    sorted_units = units[order]
    starts = np.flatnonzero(np.concatenate(([True], sorted_units[1:] != sorted_units[:-1])))
    return order, starts


def reduce_per_unit(
    units: npt.ArrayLike, values: npt.ArrayLike, rule: PerUnitRule
) -> npt.NDArray[np.float64]:
    """Reduce each privacy unit's values to one value with ``rule``.

    The caller must pass *all* rows of every unit it includes (after contribution bounding the
    Beam layer guarantees this), otherwise a unit would be counted more than once.

    Args:
        units: one privacy-unit id per row (any integer dtype; the stable unit hash).
        values: one float value per row.
        rule: ``"min"``, ``"max"`` or ``"mean"`` of the unit's values.

    Returns:
        One float64 value per distinct unit (in the order of the sorted unit ids).
    """
    if rule not in PER_UNIT_RULES:
        raise ValueError(f"'rule' must be one of {list(PER_UNIT_RULES)}; received {rule!r}")
    unit_ids = np.asarray(units).ravel()
    column = np.asarray(values, dtype=np.float64).ravel()
    if unit_ids.shape != column.shape:
        raise ValueError(
            "'units' and 'values' must have the same length; "
            f"received {unit_ids.shape[0]} and {column.shape[0]}"
        )
    if column.size == 0:
        return np.zeros(0, dtype=np.float64)
    order, starts = _unit_groups(unit_ids, column)
    ordered = column[order]
    if rule == "min":
        reduced: npt.NDArray[np.float64] = np.minimum.reduceat(ordered, starts)
    elif rule == "max":
        reduced = np.maximum.reduceat(ordered, starts)
    else:
        sizes = np.diff(np.append(starts, ordered.size))
        with np.errstate(invalid="ignore"):  # inf - inf in a unit's sum is NaN: a public rule
            reduced = np.add.reduceat(ordered, starts) / sizes
    return reduced


def threshold_histogram(values: npt.ArrayLike, thresholds: npt.NDArray[np.float64]) -> Counts:
    """Histogram of values by how many of the sorted ``thresholds`` each one reaches.

    Bucket ``b`` counts the values ``x`` with exactly ``b`` thresholds ``t <= x``; there are
    ``len(thresholds) + 1`` buckets. NaN and ±inf are not data: they reach no threshold
    (bucket 0), as a dropped value would add nothing to any ``at_least_counts``.

    Args:
        values: float values (one per privacy unit for a revenue score).
        thresholds: public thresholds, sorted strictly increasing.

    Returns:
        int64 array of length ``len(thresholds) + 1``.
    """
    column = np.asarray(values, dtype=np.float64).ravel()
    buckets = np.searchsorted(thresholds, column, side="right")
    buckets[~np.isfinite(column)] = 0
    return np.bincount(buckets, minlength=thresholds.size + 1).astype(np.int64, copy=False)


def at_least_counts(histogram: Counts) -> Counts:
    """``#{x >= thresholds[j]}`` for every threshold, from :func:`threshold_histogram`.

    A value reaches threshold ``j`` when its bucket is above ``j``, so the count is the sum of
    the buckets ``j + 1 ...`` (a reversed cumulative sum).
    """
    tail: Counts = np.cumsum(histogram[::-1])[::-1][1:]
    return tail.astype(np.int64, copy=False)


LabelKind = Literal["int", "uint", "str", "bytes"]

#: The kinds of label, in their canonical order (see :class:`LabelCounts`).
LABEL_KINDS: tuple[LabelKind, ...] = ("int", "uint", "str", "bytes")

_KIND_TYPES: dict[LabelKind, pa.DataType] = {
    "int": pa.int64(),
    "uint": pa.uint64(),
    "str": pa.large_string(),
    "bytes": pa.large_binary(),
}
_INT64_MAX = 2**63 - 1
_UINT64_MAX = 2**64 - 1

_RULE_KINDS = "candidate labels must be integers (64-bit), strings or bytes"
_RULE_NULL = "candidate labels must not be null"


def label_sort_key(label: Any) -> tuple[int, Any]:
    """The canonical order of labels of every kind: integers, then strings, then bytes.

    Within a kind labels are in their natural order (integers by value, whatever their Arrow
    type). Sorting a list that mixes integers and strings with this key never fails and gives
    the same order on every worker.
    """
    if isinstance(label, (bool, np.bool_)):
        raise data_error("labels", _RULE_KINDS)
    if isinstance(label, (int, np.integer)):
        return (0, int(label))
    if isinstance(label, str):
        return (1, label)
    if isinstance(label, (bytes, bytearray)):
        return (2, bytes(label))
    raise data_error("labels", _RULE_KINDS)


def _arrow_or_none(labels: Any) -> pa.Array | None:
    # pyarrow's conversion error quotes the offending value; it is swallowed here, so that no
    # error raised later carries it as context, and mixed labels take the slow path instead.
    try:
        return pa.array(labels)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        return None


def _kind_parts(array: pa.Array) -> list[tuple[LabelKind, pa.Array, npt.NDArray[np.intp] | None]]:
    """Split one typed Arrow array into canonical parts ``(kind, values, rows or None)``."""
    if len(array) == 0:
        return []
    if array.null_count:
        raise data_error("labels", _RULE_NULL)
    kind_type = array.type
    if pa.types.is_dictionary(kind_type):
        array = array.cast(kind_type.value_type)
        kind_type = array.type
    if pa.types.is_integer(kind_type):
        if kind_type != pa.uint64():
            return [("int", array.cast(pa.int64()), None)]
        small = pc.less_equal(array, pa.scalar(_INT64_MAX, pa.uint64()))
        if pc.all(small).as_py():
            return [("int", array.cast(pa.int64()), None)]
        mask = small.to_numpy(zero_copy_only=False)
        return [
            ("int", array.filter(small).cast(pa.int64()), np.flatnonzero(mask)),
            ("uint", array.filter(pc.invert(small)), np.flatnonzero(~mask)),
        ]
    if pa.types.is_string(kind_type) or pa.types.is_large_string(kind_type):
        return [("str", array.cast(pa.large_string()), None)]
    if (
        pa.types.is_binary(kind_type)
        or pa.types.is_large_binary(kind_type)
        or pa.types.is_fixed_size_binary(kind_type)
    ):
        return [("bytes", array.cast(pa.large_binary()), None)]
    raise data_error("labels", _RULE_KINDS)


def _python_parts(
    values: list[Any],
) -> list[tuple[LabelKind, pa.Array, npt.NDArray[np.intp] | None]]:
    """The slow path for a sequence that mixes kinds: classify every label in Python."""
    rows: dict[LabelKind, list[int]] = {kind: [] for kind in LABEL_KINDS}
    kept: dict[LabelKind, list[Any]] = {kind: [] for kind in LABEL_KINDS}
    for row, label in enumerate(values):
        if label is None:
            raise data_error("labels", _RULE_NULL)
        if isinstance(label, (bool, np.bool_)):
            raise data_error("labels", _RULE_KINDS)
        kind: LabelKind
        if isinstance(label, (int, np.integer)):
            label = int(label)
            if not -_INT64_MAX - 1 <= label <= _UINT64_MAX:
                raise data_error("labels", _RULE_KINDS)
            kind = "int" if label <= _INT64_MAX else "uint"
        elif isinstance(label, str):
            kind = "str"
        elif isinstance(label, (bytes, bytearray)):
            kind, label = "bytes", bytes(label)
        else:
            raise data_error("labels", _RULE_KINDS)
        rows[kind].append(row)
        kept[kind].append(label)
    return [
        (kind, pa.array(kept[kind], type=_KIND_TYPES[kind]), np.array(rows[kind], dtype=np.intp))
        for kind in LABEL_KINDS
        if rows[kind]
    ]


def _label_parts(labels: Any) -> list[tuple[LabelKind, pa.Array, npt.NDArray[np.intp] | None]]:
    if isinstance(labels, pa.ChunkedArray):
        labels = labels.combine_chunks()
    if isinstance(labels, pa.Array):
        return _kind_parts(labels)
    array = _arrow_or_none(labels)
    if array is not None:
        return _kind_parts(array)
    if isinstance(labels, np.ndarray):
        return _python_parts(labels.ravel().tolist())
    if isinstance(labels, (str, bytes)):
        raise data_error("labels", _RULE_KINDS)
    return _python_parts(list(labels))


class LabelCounts:
    """Counts keyed by labels from the data (integers, strings or bytes), exact and mergeable.

    Used by DP key selection: after contribution bounding with distinct candidates, the count
    of a label in one batch is its number of distinct privacy units there, and counts add
    under merge. Labels are grouped with Arrow's hash aggregation on the label values
    themselves (never a hash of them), so two different labels are never merged.

    **Canonical rule for labels of mixed types.** A label is its value *and its kind*: every
    integer (any Arrow or numpy integer type, compared as an integer), every string, every
    bytes value. Labels of different kinds are different labels even when they print alike
    (``42`` and ``"42"``), and batches, files and parts of one batch may mix kinds freely: no
    cast, no error, no message. Why a rule and not an error: whether a job succeeds must not
    depend on the data, and one unit's string among integer labels would otherwise fail the
    job (and, through Arrow's message, print the string). Why kinds stay apart rather than
    being turned into text: the grouping must never be coarser than the candidate identity
    used by contribution bounding (else one unit's two kept candidates ``42`` and ``"42"``
    would add 2 to one label and break the sensitivity of 1), and a released label keeps the
    type it was read with, which depends on that label's own records only. :attr:`labels`
    lists kinds in the order of :data:`LABEL_KINDS`; :func:`label_sort_key` sorts a mixed list.

    Nulls, floats, booleans and other types are not labels: :class:`~beam_dp.errors.BadRecordError`
    with a message built from the rule only (the encoder drops or refuses such records before
    they get here).

    :meth:`add` and :meth:`merge` only append parts; :meth:`compact` groups them, so adding
    many batches costs one grouping, not one per batch.
    """

    __slots__ = ("_counts", "_grouped", "_labels")

    def __init__(self) -> None:
        self._labels: dict[LabelKind, list[pa.Array]] = {}
        self._counts: dict[LabelKind, list[Counts]] = {}
        self._grouped = True

    def add(self, labels: Any, counts: npt.ArrayLike | None = None) -> LabelCounts:
        """Add one count per label (1 each when ``counts`` is None) and return ``self``.

        Args:
            labels: an Arrow array, a numpy array or a sequence of labels (kinds may mix).
            counts: one non-negative count per label, or None.

        Raises:
            BadRecordError: a null label, or one that is not an integer, string or bytes (the
                message names the rule only).
            ValueError: ``counts`` of another length than ``labels``.
        """
        parts = _label_parts(labels)
        size = sum(len(part) for _, part, _ in parts)
        if counts is None:
            values = np.ones(size, dtype=np.int64)
        else:
            values = _count_array(counts)
            if values.shape[0] != size:
                raise ValueError("'labels' and 'counts' must have the same length")
        for kind, part, rows in parts:
            if not len(part):
                continue
            self._labels.setdefault(kind, []).append(part)
            self._counts.setdefault(kind, []).append(values if rows is None else values[rows])
            self._grouped = False
        return self

    def merge(self, others: Iterable[LabelCounts]) -> LabelCounts:
        """Add ``others`` into this summary in place (they are not modified); return ``self``."""
        for other in others:
            for kind, parts in other._labels.items():
                self._labels.setdefault(kind, []).extend(parts)
                self._counts.setdefault(kind, []).extend(other._counts[kind])
                self._grouped = False
        return self

    def compact(self) -> LabelCounts:
        """Group the parts so that each label appears once; return ``self``."""
        if self._grouped:
            return self
        for kind in list(self._labels):
            table = pa.table(
                {
                    "label": pa.concat_arrays(self._labels[kind]),
                    "count": np.concatenate(self._counts[kind]),
                }
            )
            grouped = table.group_by("label").aggregate([("count", "sum")])
            self._labels[kind] = [grouped.column("label").combine_chunks()]
            self._counts[kind] = [grouped.column("count_sum").to_numpy().astype(np.int64)]
        self._grouped = True
        return self

    def _kinds(self) -> list[LabelKind]:
        return [kind for kind in LABEL_KINDS if kind in self._labels]

    @property
    def labels(self) -> pa.Array:
        """The distinct labels (compacts first).

        One kind: an array of that kind's type (int64, uint64, large_string, large_binary).
        Several: a dense union with one child per kind, in the order of :data:`LABEL_KINDS`.
        """
        self.compact()
        kinds = self._kinds()
        if not kinds:
            return pa.array([], type=pa.string())
        if len(kinds) == 1:
            only: pa.Array = self._labels[kinds[0]][0]
            return only
        children = [self._labels[kind][0] for kind in kinds]
        type_ids = np.concatenate(
            [np.full(len(child), i, dtype=np.int8) for i, child in enumerate(children)]
        )
        offsets = np.concatenate([np.arange(len(child), dtype=np.int32) for child in children])
        return pa.UnionArray.from_dense(
            pa.array(type_ids, type=pa.int8()),
            pa.array(offsets, type=pa.int32()),
            children,
            field_names=list(kinds),
        )

    @property
    def counts(self) -> Counts:
        """The count of each label of :attr:`labels` (compacts first)."""
        self.compact()
        kinds = self._kinds()
        if not kinds:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate([self._counts[kind][0] for kind in kinds])

    def __len__(self) -> int:
        self.compact()
        return sum(len(self._labels[kind][0]) for kind in self._kinds())

    def to_dict(self) -> dict[Any, int]:
        """``{label: count}`` (for tests and small summaries)."""
        return dict(zip(self.labels.to_pylist(), self.counts.tolist(), strict=True))

    def __getstate__(
        self,
    ) -> tuple[dict[LabelKind, list[pa.Array]], dict[LabelKind, list[Counts]], bool]:
        return self._labels, self._counts, self._grouped

    def __setstate__(
        self, state: tuple[dict[LabelKind, list[pa.Array]], dict[LabelKind, list[Counts]], bool]
    ) -> None:
        self._labels, self._counts, self._grouped = state

    def __repr__(self) -> str:
        parts = sum(len(parts) for parts in self._labels.values())
        return f"LabelCounts(<{parts} part(s)>)"


def _count_array(counts: npt.ArrayLike) -> Counts:
    # Conversion errors may quote a value: swallowed, and the rule raised outside the handler.
    array: Counts | None
    try:
        array = np.asarray(counts, dtype=np.int64).ravel()
    except (TypeError, ValueError, OverflowError):
        array = None
    if array is None:
        raise TypeError("'counts' must be integers")
    return array
