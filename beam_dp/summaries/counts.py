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
  never be merged by accident.

Functions validate their public arguments (sizes, rules) and never put a data value in an error.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pyarrow as pa

__all__ = [
    "PER_UNIT_RULES",
    "LabelCounts",
    "PerUnitRule",
    "at_least_counts",
    "candidate_counts",
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
    ``len(thresholds) + 1`` buckets. NaN reaches no threshold (bucket 0); ``+inf`` reaches all.

    Args:
        values: float values (one per privacy unit for a revenue score).
        thresholds: public thresholds, sorted strictly increasing.

    Returns:
        int64 array of length ``len(thresholds) + 1``.
    """
    column = np.asarray(values, dtype=np.float64).ravel()
    buckets = np.searchsorted(thresholds, column, side="right")
    buckets[np.isnan(column)] = 0
    return np.bincount(buckets, minlength=thresholds.size + 1).astype(np.int64, copy=False)


def at_least_counts(histogram: Counts) -> Counts:
    """``#{x >= thresholds[j]}`` for every threshold, from :func:`threshold_histogram`.

    A value reaches threshold ``j`` when its bucket is above ``j``, so the count is the sum of
    the buckets ``j + 1 ...`` (a reversed cumulative sum).
    """
    tail: Counts = np.cumsum(histogram[::-1])[::-1][1:]
    return tail.astype(np.int64, copy=False)


class LabelCounts:
    """Counts keyed by labels from the data (strings or integers), exact and mergeable.

    Used by DP key selection: after contribution bounding with distinct candidates, the count
    of a label in one batch is its number of distinct privacy units there, and counts add
    under merge. Labels are grouped with Arrow's hash aggregation on the label values
    themselves (never a hash of them), so two different labels are never merged.

    :meth:`add` and :meth:`merge` only append parts; :meth:`compact` groups them, so adding
    many batches costs one grouping, not one per batch.
    """

    __slots__ = ("_counts", "_grouped", "_labels")

    def __init__(self) -> None:
        self._labels: list[pa.Array] = []
        self._counts: list[Counts] = []
        self._grouped = True

    def add(self, labels: Any, counts: npt.ArrayLike | None = None) -> LabelCounts:
        """Add one count per label (1 each when ``counts`` is None) and return ``self``."""
        array = labels if isinstance(labels, pa.Array) else pa.array(labels)
        if array.null_count:
            raise ValueError("labels must not be null")
        if len(array) == 0:
            return self
        values = (
            np.ones(len(array), dtype=np.int64)
            if counts is None
            else np.asarray(counts, dtype=np.int64).ravel()
        )
        if values.shape[0] != len(array):
            raise ValueError("'labels' and 'counts' must have the same length")
        if self._labels and array.type != self._labels[0].type:
            array = array.cast(self._labels[0].type)
        self._labels.append(array)
        self._counts.append(values)
        self._grouped = False
        return self

    def merge(self, others: Iterable[LabelCounts]) -> LabelCounts:
        """Add ``others`` into this summary in place (they are not modified); return ``self``."""
        for other in others:
            for labels, counts in zip(other._labels, other._counts, strict=True):
                self.add(labels, counts)
        return self

    def compact(self) -> LabelCounts:
        """Group the parts so that each label appears once; return ``self``."""
        if self._grouped:
            return self
        table = pa.table(
            {"label": pa.concat_arrays(self._labels), "count": np.concatenate(self._counts)}
        )
        grouped = table.group_by("label").aggregate([("count", "sum")])
        self._labels = [grouped.column("label").combine_chunks()]
        self._counts = [grouped.column("count_sum").to_numpy().astype(np.int64)]
        self._grouped = True
        return self

    @property
    def labels(self) -> pa.Array:
        """The distinct labels (compacts first)."""
        self.compact()
        return self._labels[0] if self._labels else pa.array([], type=pa.string())

    @property
    def counts(self) -> Counts:
        """The count of each label of :attr:`labels` (compacts first)."""
        self.compact()
        return self._counts[0] if self._counts else np.zeros(0, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.labels)

    def to_dict(self) -> dict[Any, int]:
        """``{label: count}`` (for tests and small summaries)."""
        return dict(zip(self.labels.to_pylist(), self.counts.tolist(), strict=True))

    def __getstate__(self) -> tuple[list[pa.Array], list[Counts], bool]:
        return self._labels, self._counts, self._grouped

    def __setstate__(self, state: tuple[list[pa.Array], list[Counts], bool]) -> None:
        self._labels, self._counts, self._grouped = state

    def __repr__(self) -> str:
        return f"LabelCounts(<{len(self._labels)} part(s)>)"
