"""Contribution bounding on a column batch, vectorised.

:func:`bound_rows` must see *every* row of each privacy unit it is given (the Beam layer
guarantees this by shuffling rows to shards by the stable unit hash). It then enforces, in
this order:

1. ``distinct_candidates``: duplicate (unit, key, candidate) rows count once;
2. ``max_keys_per_unit``: a unit keeps rows for at most this many distinct keys (partitions);
3. ``max_contributions_per_unit``: at most this many rows per (unit, key).

Which rows are kept when a unit exceeds a bound is decided by a salted hash of the row, so
the choice is pseudo-random, not biased to the order in which files were read. Any per-unit
rule keeps the result a function of each unit's own data, which is all that privacy needs;
the sensitivity of every score is derived from these bounds.
"""

from __future__ import annotations

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


def _row_priority(batch: ColumnBatch, salt: np.uint64) -> npt.NDArray[np.uint64]:
    h = batch[UNIT] ^ salt
    with np.errstate(over="ignore"):
        if CANDIDATE in batch:
            h = _mix(h ^ batch[CANDIDATE].view(np.uint64))
        if VALUE in batch:
            h = _mix(h ^ batch[VALUE].view(np.uint64))
        if KEY in batch:
            h = _mix(h ^ (batch[KEY].view(np.uint64) * np.uint64(0x9E3779B97F4A7C15)))
        # Only the row's own content decides its priority, never its position: which rows of
        # a unit survive must not depend on other units' rows. Identical rows tie, and any
        # of them may be kept since they are interchangeable.
        return _mix(h)


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
        The kept rows (a new batch; row order is not preserved).
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
        # The first row of each (unit, key, candidate), found with Arrow's hash grouping
        # (linear time; a lexsort of the three columns costs twice as much).
        rows = pa.table({"u": unit, "k": key, "c": batch[CANDIDATE], "i": keep})
        first = rows.group_by(["u", "k", "c"]).aggregate([("i", "min")])
        keep = first.column("i_min").to_numpy()

    if bounds.max_keys_per_unit is not None and KEY in batch:
        u, k = unit[keep], key[keep]
        with np.errstate(over="ignore"):
            key_priority = _mix(u ^ salt64 ^ (k.view(np.uint64) * np.uint64(0xD6E8FEB86659FD93)))
        order = np.lexsort((key_priority, u))
        su, sk = u[order], k[order]
        pair_starts = _group_starts(su, sk)
        unit_starts = _group_starts(su)
        # rank of each distinct key within its unit, by key priority
        pair_rank = np.cumsum(pair_starts) - 1
        first_pair_of_unit = np.maximum.accumulate(np.where(unit_starts, pair_rank, 0))
        key_rank = pair_rank - first_pair_of_unit
        keep = keep[order[key_rank < bounds.max_keys_per_unit]]

    if bounds.max_contributions_per_unit is not None:
        sub = take(batch, keep)
        priority = _row_priority(sub, salt64)
        u, k = sub[UNIT], key[keep]
        order = np.lexsort((priority, k, u))
        ranks = _rank_within_groups(_group_starts(u[order], k[order]))
        keep = keep[order[ranks < bounds.max_contributions_per_unit]]

    return take(batch, keep)
