"""Contribution bounding on a column batch, vectorised.

:func:`bound_rows` must see *every* row of each privacy unit it is given (the Beam layer
guarantees this by shuffling rows to shards by the stable unit hash). It then enforces, in
this order:

1. ``distinct_candidates``: duplicate (unit, key, candidate) rows count once;
2. ``max_keys_per_unit``: a unit keeps rows for at most this many distinct keys (partitions),
   chosen uniformly among its distinct keys;
3. ``max_contributions_per_unit``: at most this many rows per (unit, key).

**Which rows survive.** Where a unit exceeds a bound, it keeps a uniform sample of its *rows*
(not of its distinct values): every row gets a priority from a salted hash of its content
*and of its occurrence index among the identical rows of its group* (the first copy of a row,
the second copy, ...), and the rows with the lowest priorities are kept. Identical rows thus
get independent priorities, so a value that a unit holds three times is kept three times as
often as a value it holds once, as in a uniform sample of rows; a content hash alone would
make identical rows tie and keep distinct values uniformly, which biases every statistic on
data with repeated values. The choice is a function of the unit's own multiset of rows and
the salt only: never of other units' rows, nor of the order of rows, batches or files.
Privacy needs only that the choice depends on no other unit (the sensitivity of every score
is derived from the bounds); uniformity is for accuracy, independence of order for
reproducible runs.

**Cost.** Rows are grouped by one sort of 64-bit *values* (not an argsort: numpy sorts values
several times faster): the group hash's high bits with the row's index in the low bits, so
the sorted values carry the order. The rare buckets where two groups share those bits are
re-sorted exactly by the group's columns. If no bucket holds more rows than the bound, no
group does and the batch is returned as it is (the fast path), before any other work. Copies
of a row (equal 64-bit content hash in one group; two different rows collide with
probability about 2**-64 and are then sampled as copies: still uniformly) are found with one
more sort of values, and only the repeated rows are ordered to number their copies. With a
bound of 1 the lowest priority per group is then found in linear time; larger bounds sort
once more, only the rows of groups that exceed the bound.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from beam_dp.batching.columns import CANDIDATE, KEY, UNIT, VALUE, ColumnBatch, num_rows, take
from beam_dp.batching.hashing import _mix

__all__ = ["ContributionBounds", "bound_rows"]


@dataclass(frozen=True)
class ContributionBounds:
    """What one privacy unit may contribute, enforced by :func:`bound_rows`.

    Attributes:
        max_contributions_per_unit: rows kept per (unit, key); ``None`` for no row bound
            (only valid for scores whose sensitivity does not depend on it, such as
            distinct-unit counts with ``distinct_candidates``).
        max_keys_per_unit: distinct partition keys kept per unit (``.PerKey``); ``None`` when
            there are no keys.
        distinct_candidates: count each (unit, key, candidate) once.
    """

    max_contributions_per_unit: int | None = 1
    max_keys_per_unit: int | None = None
    distinct_candidates: bool = False

    def __post_init__(self) -> None:
        for name in ("max_contributions_per_unit", "max_keys_per_unit"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"'{name}' must be an integer >= 1 or None; received {value!r}")

    def to_dict(self) -> dict[str, int]:
        """The bounds as a JSON object for release records (unbounded entries omitted)."""
        out: dict[str, int] = {}
        if self.max_contributions_per_unit is not None:
            out["max_contributions_per_unit"] = int(self.max_contributions_per_unit)
        if self.max_keys_per_unit is not None:
            out["max_keys_per_unit"] = int(self.max_keys_per_unit)
        if self.distinct_candidates:
            out["distinct_candidates"] = 1
        return out


_ODD = (
    np.uint64(0x9E3779B97F4A7C15),
    np.uint64(0xD6E8FEB86659FD93),
    np.uint64(0xC2B2AE3D27D4EB4F),
)
_DISTINCT_SALT = np.uint64(0x5851F42D4C957F2D)
_MAX_GROUP_BITS = 40  # group ids up to 2**40 share one sort key with a priority's high bits
_MAX_ROW_BITS = 40  # row indices up to 2**40 share one sorted value with a group's high bits

U64 = npt.NDArray[np.uint64]
Index = npt.NDArray[np.intp]


def _as_u64(column: npt.NDArray[Any]) -> U64:
    bits: U64 = column.view(np.uint64) if column.dtype.itemsize == 8 else column.astype(np.uint64)
    return bits


def _row_hash(batch: ColumnBatch, salt: np.uint64) -> U64:
    """A salted hash of a row's content (its unit, candidate, value and key)."""
    h = batch[UNIT] ^ salt
    with np.errstate(over="ignore"):
        if CANDIDATE in batch:
            h = _mix(h ^ _as_u64(batch[CANDIDATE]))
        if VALUE in batch:
            h = _mix(h ^ _as_u64(batch[VALUE]))
        if KEY in batch:
            h = _mix(h ^ (_as_u64(batch[KEY]) * _ODD[0]))
        return _mix(h)


def _group_hash(group: Sequence[npt.NDArray[Any]]) -> U64:
    """A hash of each row's group (its first column is the uint64 unit hash)."""
    h: U64 = group[0]
    with np.errstate(over="ignore"):
        for position, column in enumerate(group[1:]):
            h = _mix(h ^ (_as_u64(column) * _ODD[position % len(_ODD)]))
    return h


def _differs(columns: Sequence[npt.NDArray[Any]]) -> npt.NDArray[np.bool_]:
    """For each position but the first: does any column differ from the previous row?"""
    out = np.zeros(max(columns[0].size - 1, 0), dtype=bool)
    for column in columns:
        out |= column[1:] != column[:-1]
    return out


def _order_groups(
    group: Sequence[npt.NDArray[Any]], g: U64, bound: int
) -> tuple[Index, npt.NDArray[np.bool_]] | None:
    """An order that brings each group's rows together, and where groups start in it.

    ``None`` when no group has more than ``bound`` rows (the batch is kept as it is).

    One sort of 64-bit *values* (numpy sorts values several times faster than it argsorts
    them): the group hash's high bits with the row's index in the low bits, so the sorted
    values carry the order. Rows of one group share a bucket (the high bits); no bucket with
    more than ``bound`` rows means no group with more. The rare buckets that hold several
    groups are re-sorted exactly by the group's columns.
    """
    n = g.size
    row_bits = max((n - 1).bit_length(), 1)
    if row_bits > _MAX_ROW_BITS:  # pragma: no cover - batches of 2**40 rows do not fit in memory
        order: Index = np.lexsort(list(reversed(group)))
        bucket = g[order]
    else:
        shift = np.uint64(row_bits)
        packed = np.sort(((g >> shift) << shift) | np.arange(n, dtype=np.uint64))
        order = (packed & np.uint64((1 << row_bits) - 1)).astype(np.intp)
        bucket = packed >> shift
    same_bucket = bucket[1:] == bucket[:-1]
    bucket_starts = np.flatnonzero(np.concatenate(([True], ~same_bucket)))
    if int(np.diff(np.append(bucket_starts, n)).max()) <= bound:
        return None  # the fast path: no unit exceeds its bound
    group_sorted = [column[order] for column in group]
    new_group = _differs(group_sorted)
    conflict = same_bucket & new_group
    if conflict.any():
        bucket_id = np.concatenate(([0], np.cumsum(~same_bucket)))
        flagged = np.zeros(int(bucket_id[-1]) + 1, dtype=bool)
        flagged[bucket_id[1:][conflict]] = True
        rows = np.flatnonzero(flagged[bucket_id])
        # lexsort: last key first; the bucket keeps these rows inside their bucket's range
        within = np.lexsort([*(c[rows] for c in reversed(group_sorted)), bucket_id[rows]])
        order[rows] = order[rows][within]
        for column in group_sorted:
            column[rows] = column[rows][within]
        new_group = _differs(group_sorted)
    return order, np.concatenate(([True], new_group))


def _copy_index(h: U64) -> U64:
    """For each row, its index among the rows with the same ``h`` (0 for a row seen once).

    Which copy gets which index follows the rows' order, but copies are identical rows, so
    the multiset of (row, index) pairs, and so every sample drawn from it, does not.
    """
    index = np.zeros(h.size, dtype=np.uint64)
    values = np.sort(h)
    repeated = values[1:][values[1:] == values[:-1]]
    if not repeated.size:
        return index  # no copies: the common case for measured values
    repeated = np.unique(repeated)
    at = np.minimum(np.searchsorted(repeated, h), repeated.size - 1)
    rows = np.flatnonzero(repeated[at] == h)
    ordered = rows[np.argsort(h[rows], kind="stable")]
    index[ordered] = _rank_within_groups(_group_starts(h[ordered])).astype(np.uint64)
    return index


def _sample_groups(
    group: Sequence[npt.NDArray[Any]], h: U64 | Callable[[], U64], bound: int
) -> Index | None:
    """Rows kept by a uniform sample of ``bound`` rows of every group (``None``: all rows).

    Args:
        group: columns whose equal values form a group (the first is the unit hash).
        h: a salted hash of each row's content, or a function computing it (called only if
            a group exceeds the bound). Rows with equal ``h`` in a group are copies of one
            row (for distinct rows, a 64-bit collision, so about 2**-64 per pair: they are
            then still sampled uniformly, as copies).
        bound: how many rows each group keeps.
    """
    g = group[0] if len(group) == 1 else _group_hash(group)
    grouped = _order_groups(group, g, bound)
    if grouped is None:
        return None
    order, group_starts = grouped
    starts = np.flatnonzero(group_starts)
    sizes = np.diff(np.append(starts, g.size))
    if int(sizes.max()) <= bound:
        return None
    if callable(h):
        h = h()
    with np.errstate(over="ignore"):
        copy = _copy_index(h ^ (g * _ODD[2]))  # copies: equal content in the same group
        priority = _mix(h ^ (copy * _ODD[1]))[order]
    group_id = np.cumsum(group_starts) - 1
    if bound == 1:  # the lowest priority of each group, in linear time
        lowest = np.minimum.reduceat(priority, starts)
        hits = np.flatnonzero(priority == lowest[group_id])
        first = np.concatenate(([True], group_id[hits][1:] != group_id[hits][:-1]))
        kept: Index = order[hits[first]]
        return kept
    over = (sizes > bound)[group_id]
    rows = np.flatnonzero(over)
    dense = np.cumsum(np.concatenate(([True], group_id[rows][1:] != group_id[rows][:-1]))) - 1
    bits = max(int(dense[-1]).bit_length(), 1)
    if bits <= _MAX_GROUP_BITS:  # one key: the group in the high bits, the priority below
        shift = np.uint64(bits)
        within = np.argsort(
            (dense.astype(np.uint64) << np.uint64(64 - bits)) | (priority[rows] >> shift),
            kind="stable",
        )
    else:
        within = np.lexsort((priority[rows], dense))
    rank = _rank_within_groups(_group_starts(dense[within]))
    chosen = rows[within[rank < bound]]
    return np.concatenate((order[~over], order[chosen]))


def _group_starts(*sorted_columns: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
    n = sorted_columns[0].shape[0]
    starts = np.zeros(n, dtype=bool)
    if n:
        starts[0] = True
        for column in sorted_columns:
            starts[1:] |= column[1:] != column[:-1]
    return starts


def _rank_within_groups(starts: npt.NDArray[np.bool_]) -> npt.NDArray[np.int64]:
    positions = np.arange(starts.size)
    group_first = np.maximum.accumulate(np.where(starts, positions, 0))
    ranks: npt.NDArray[np.int64] = positions - group_first
    return ranks


def bound_rows(batch: ColumnBatch, bounds: ContributionBounds, salt: int) -> ColumnBatch:
    """Apply ``bounds`` to a batch that holds all rows of the units in it.

    Args:
        batch: an encoded column batch with a ``UNIT`` column.
        bounds: the contribution bounds.
        salt: a per-run random integer that decides which rows survive a bound.

    Returns:
        The kept rows: a uniform sample of each unit's rows within ``bounds`` (see the module
        docstring), in no particular order; ``batch`` itself when no row is dropped.

    **Privacy**: which rows of a unit survive depends only on that unit's multiset of rows
    and on ``salt``, so the bounded data set of neighbours differs by at most one unit's
    bounded rows, and every score's sensitivity follows from ``bounds``.
    """
    if UNIT not in batch:
        raise ValueError("bound_rows needs a privacy-unit column; none was encoded")
    if num_rows(batch) == 0:
        return batch
    salt64 = np.uint64(salt & 0xFFFFFFFFFFFFFFFF)
    unit = batch[UNIT]
    key = batch[KEY] if KEY in batch else np.zeros(unit.size, dtype=np.int64)
    keep = np.arange(unit.size)

    if bounds.distinct_candidates and CANDIDATE in batch:
        if VALUE in batch:
            # one row per (unit, key, candidate), uniform over that triple's rows
            h = _row_hash(batch, salt64 ^ _DISTINCT_SALT)
            chosen = _sample_groups([unit, key, batch[CANDIDATE]], h, 1)
            keep = keep if chosen is None else chosen
        else:
            # rows with equal (unit, key, candidate) are identical: any one will do. Arrow's
            # hash grouping finds the first (linear time; a lexsort costs twice as much).
            rows = pa.table({"u": unit, "k": key, "c": batch[CANDIDATE], "i": keep})
            first = rows.group_by(["u", "k", "c"]).aggregate([("i", "min")])
            keep = first.column("i_min").to_numpy()

    if bounds.max_keys_per_unit is not None and KEY in batch:
        u, k = unit[keep], key[keep]
        with np.errstate(over="ignore"):
            key_priority = _mix(u ^ salt64 ^ (k.view(np.uint64) * _ODD[1]))
        order = np.lexsort((key_priority, u))
        su, sk = u[order], k[order]
        pair_starts = _group_starts(su, sk)
        unit_starts = _group_starts(su)
        # rank of each distinct key within its unit, by key priority
        pair_rank = np.cumsum(pair_starts) - 1
        first_pair_of_unit = np.maximum.accumulate(np.where(unit_starts, pair_rank, 0))
        key_rank = pair_rank - first_pair_of_unit
        keep = keep[order[key_rank < bounds.max_keys_per_unit]]

    if bounds.max_contributions_per_unit is not None and keep.size:
        if keep.size == unit.size:  # every row is still in: bound the batch itself, no copy
            keep = np.arange(unit.size)
            sub = batch
        else:
            sub = take(batch, keep)
        group = [sub[UNIT], sub[KEY]] if KEY in sub else [sub[UNIT]]
        chosen = _sample_groups(
            group, lambda: _row_hash(sub, salt64), int(bounds.max_contributions_per_unit)
        )
        if chosen is not None:
            keep = keep[chosen]

    if keep.size == unit.size:
        return batch
    return take(batch, keep)
